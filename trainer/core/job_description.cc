#include "trainer/core/job_description.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/transport/wire_limits.h"

namespace shardps {
namespace {

constexpr int64_t kDefaultBlockSize = 65536;

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

JobSpec MakeJobSpec(const TrainerOptions& o,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<int64_t>>& shapes,
                    const std::vector<OptimizerConfig>& optimizers) {
  JobSpec job;
  job.set_mode(o.mode);
  job.set_num_trainers(o.num_trainers);
  job.set_max_staleness(o.mode == ASYNC ? o.max_staleness : -1);
  job.set_global_batch_size(int64_t{o.batch_size} * o.num_trainers);
  job.set_replicas_to_aggregate(o.replicas_to_aggregate);
  if (o.replication > 1) {
    job.set_replication(o.replication);
    // Set only when not the default (0 is read as it), so that a job
    // checkpointed before these fields existed is the same job.
    const TrainerOptions defaults;
    if (o.pserver_lease != defaults.pserver_lease) {
      job.set_pserver_lease_ms(
          static_cast<int32_t>(absl::ToInt64Milliseconds(o.pserver_lease)));
    }
    if (o.failover_after != defaults.failover_after) {
      job.set_failover_after_ms(
          static_cast<int32_t>(absl::ToInt64Milliseconds(o.failover_after)));
    }
  }
  const int64_t block_size =
      o.config.block_size() > 0 ? o.config.block_size() : kDefaultBlockSize;
  for (size_t i = 0; i < names.size(); ++i) {
    TableSpec* t = job.add_tables();
    t->set_name(names[i]);
    for (int64_t d : shapes[i]) t->add_shape(d);
    t->set_block_size(block_size);
    *t->mutable_optimizer() = optimizers[i];
  }
  return job;
}

absl::Status JobDescription::CheckName(const std::string& name) const {
  if (name.empty()) return Bad("a table needs a name");
  const bool taken =
      std::find(names_.begin(), names_.end(), name) != names_.end() ||
      std::any_of(sparse_.begin(), sparse_.end(),
                  [&](const TableSpec& t) { return t.name() == name; });
  if (taken) return Bad(absl::StrCat("table ", name, " is added twice"));
  return absl::OkStatus();
}

absl::Status JobDescription::CheckLars(const std::string& name) const {
  const char* why = o_.mode != SYNC                ? "--mode=async"
                    : o_.replicas_to_aggregate > 0 ? "--replicas_to_aggregate"
                    : o_.compression == Compression::kThreshold
                        ? "--compression=threshold"
                        : nullptr;
  if (why == nullptr) return absl::OkStatus();
  return Bad(absl::StrCat(
      "table ", name, " has LARS, which does not work with ", why,
      ": its trust ratio needs the whole table's norms at each sync "
      "step (docs/tuning.md, \"LARS\")"));
}

absl::StatusOr<int> JobDescription::AddDense(const std::string& name,
                                             const std::vector<int64_t>& shape,
                                             const OptimizerConfig& optimizer) {
  RETURN_IF_ERROR(CheckName(name));
  if (shape.empty()) return Bad(absl::StrCat("table ", name, ": no shape"));
  int64_t size = 1;
  for (int64_t d : shape) {
    if (d <= 0 || size > (int64_t{1} << 40) / d) {
      return Bad(absl::StrCat("table ", name, ": dimension ", d,
                              " is not positive or the table is too large"));
    }
    size *= d;
  }
  if (optimizer.type() == OptimizerConfig::LARS) {
    RETURN_IF_ERROR(CheckLars(name));
    lars_.resize(names_.size() + 1);
    lars_.back() = true;
  } else if (!lars_.empty()) {
    lars_.push_back(false);
  }
  names_.push_back(name);
  shapes_.push_back(shape);
  optimizers_.push_back(optimizer);
  return static_cast<int>(names_.size()) - 1;
}

absl::StatusOr<int> JobDescription::AddSparse(
    const std::string& name, const SparseTableOptions& sparse,
    const OptimizerConfig& optimizer) {
  RETURN_IF_ERROR(CheckName(name));
  if (sparse.dim() < 1 || sparse.dim() > 65536) {
    return Bad(absl::StrCat("sparse table ", name, ": dim ", sparse.dim(),
                            " is not in [1, 65536]"));
  }
  if (optimizer.type() == OptimizerConfig::LARS) {
    return Bad(absl::StrCat("sparse table ", name,
                            " has LARS, which is for dense tables"));
  }
  TableSpec t;
  t.set_name(name);
  t.set_kind(TableSpec::SPARSE);
  *t.mutable_sparse() = sparse;
  *t.mutable_optimizer() = optimizer;
  sparse_.push_back(std::move(t));
  return static_cast<int>(sparse_.size()) - 1;
}

absl::StatusOr<DescribedJob> JobDescription::Build() const {
  if (o_.config.block_size() < 0 || o_.config.block_size() > kMaxBlockSize) {
    return Bad(absl::StrCat("config: block_size must be in [1, ", kMaxBlockSize,
                            "], got ", o_.config.block_size()));
  }
  if (empty()) return Bad("the job has no table (a model without parameters?)");
  DescribedJob d;
  std::vector<OptimizerConfig> pushed = optimizers_;
  std::vector<size_t> sizes;
  for (const auto& shape : shapes_) {
    int64_t n = 1;
    for (int64_t dim : shape) n *= dim;
    sizes.push_back(static_cast<size_t>(n));
  }
  if (o_.compression == Compression::kThreshold) {
    d.threshold = o_.threshold;
    if (d.threshold.threshold == 0) {
      for (const OptimizerConfig& oc : optimizers_) {
        d.threshold.table_thresholds.push_back(
            UpdateSharing::DefaultThreshold(oc));
      }
    }
    // The pservers apply the updates with plain SGD (`pushed`).
    ASSIGN_OR_RETURN(d.sharing, UpdateSharing::Create(
                                    names_, &pushed, sizes, o_.momentum_masking,
                                    int64_t{o_.batch_size} * o_.num_trainers));
  }
  d.job = MakeJobSpec(o_, names_, shapes_, pushed);
  for (size_t t = 0; t < names_.size(); ++t) {
    d.layouts.push_back(DenseTableLayout{names_[t],
                                         static_cast<int64_t>(sizes[t]),
                                         d.job.tables(t).block_size()});
  }
  for (const TableSpec& t : sparse_) *d.job.add_tables() = t;
  return d;
}

}  // namespace shardps
