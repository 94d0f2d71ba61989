#include "pserver/store/job_tables.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "kernels/finite.h"
#include "pserver/store/sparse/disk_tier_plan.h"

namespace shardps {
namespace {

// The position and kind of the first value of `v` beyond `bound`, for a
// message.
std::string FirstOutOfRange(absl::Span<const float> v, float bound) {
  for (size_t j = 0; j < v.size(); ++j) {
    if (!std::isfinite(v[j])) {
      return absl::StrCat(j, " is ", std::isnan(v[j]) ? "NaN" : "Inf");
    }
    if (std::fabs(v[j]) > bound) {
      return absl::StrCat(j, " is ", v[j], ", beyond +-", bound,
                          " (the sum of every trainer's could overflow)");
    }
  }
  return "";
}

}  // namespace

absl::Status ValidateJob(const JobSpec& job, int expected_trainers) {
  if (job.mode() != SYNC && job.mode() != ASYNC) {
    return absl::InvalidArgumentError("InitJob: mode must be SYNC or ASYNC");
  }
  if (job.num_trainers() <= 0 || job.num_trainers() > kMaxTrainers) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: num_trainers must be in [1, ", kMaxTrainers,
                     "], got ", job.num_trainers()));
  }
  if (job.replicas_to_aggregate() < 0 ||
      job.replicas_to_aggregate() > job.num_trainers() ||
      (job.replicas_to_aggregate() > 0 && job.mode() != SYNC)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: replicas_to_aggregate must be in [0, num_trainers = ",
        job.num_trainers(), "] and needs SYNC mode, got ",
        job.replicas_to_aggregate()));
  }
  if (expected_trainers > 0 && job.num_trainers() != expected_trainers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "InitJob: the job has ", job.num_trainers(),
        " trainers but this pserver was started with --num_gradient_servers=",
        expected_trainers));
  }
  return absl::OkStatus();
}

namespace {

// INVALID_ARGUMENT unless sparse table `spec`'s row initializer has a known
// type and a sound scale.
absl::Status ValidateRowInitializer(const TableSpec& spec) {
  const RowInitializer& init = spec.sparse().init();
  if (!RowInitializer::Type_IsValid(init.type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: sparse table ", spec.name(),
                     " has unknown initializer type ", init.type()));
  }
  // A row's initial values come from the scale alone: NaN, infinite or
  // absurd ones would be every new row's (and every gradient's) poison.
  if (!std::isfinite(init.scale()) ||
      std::fabs(init.scale()) > kMaxInitializerScale ||
      (init.type() == RowInitializer::UNIFORM && init.scale() < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: sparse table ", spec.name(), " has initializer scale ",
        init.scale(), "; it must be finite, in [-", kMaxInitializerScale, ", ",
        kMaxInitializerScale, "], and >= 0 for UNIFORM"));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless sparse table `spec`'s eviction and admission
// bounds are sound.
absl::Status ValidateEviction(const TableSpec& spec) {
  const SparseTableOptions& so = spec.sparse();
  const EvictionOptions& e = so.eviction();
  auto bad = [&spec](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("InitJob: sparse table ",
                                                   spec.name(), ": ", what,
                                                   " (docs/sparse_memory.md)"));
  };
  if (!EvictionOptions::Policy_IsValid(e.policy())) {
    return bad(absl::StrCat("unknown eviction policy ", e.policy()));
  }
  if (e.lfu_half_life_steps() < 0 || e.ttl_steps() < 0 ||
      e.scan_every_steps() < 0) {
    return bad(
        "eviction lfu_half_life_steps, ttl_steps and scan_every_steps "
        "must be >= 0");
  }
  // Ten years of seconds; a norm a float can hold.
  if (!(e.ttl_seconds() >= 0 && e.ttl_seconds() <= 3.2e8)) {
    return bad(absl::StrCat("eviction ttl_seconds ", e.ttl_seconds(),
                            " is not in [0, 3.2e8]"));
  }
  if (!(e.min_l2_norm() >= 0 && std::isfinite(e.min_l2_norm()))) {
    return bad(absl::StrCat("eviction min_l2_norm ", e.min_l2_norm(),
                            " is not finite and >= 0"));
  }
  if (so.admission_max_keys() < 0 || so.admission_max_keys() > (1ll << 32)) {
    return bad(absl::StrCat("admission_max_keys ", so.admission_max_keys(),
                            " is not in [0, 2^32]"));
  }
  if (so.admit_after() > (1ll << 31)) {
    return bad(absl::StrCat("admit_after ", so.admit_after(), " is past 2^31"));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT for a storage_type that is unknown, or FP16 under an
// optimizer that keeps squared gradients (half precision flushes those
// below 6e-8 to 0, and a zero accumulator makes the next step huge).
absl::Status ValidateStorage(const TableSpec& spec) {
  const SparseTableOptions& so = spec.sparse();
  if (!SparseTableOptions::RowStorage_IsValid(so.storage_type())) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: sparse table ", spec.name(),
                     " has unknown storage_type ", so.storage_type()));
  }
  const OptimizerConfig::Type type = spec.optimizer().type();
  if (so.storage_type() == SparseTableOptions::FP16 &&
      type != OptimizerConfig::SGD && type != OptimizerConfig::MOMENTUM) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: sparse table ", spec.name(), ": storage_type FP16 cannot ",
        "hold ", OptimizerConfig::Type_Name(type),
        "'s state (squared gradients under 6e-8 become 0); use BF16"));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless sparse table `spec`'s options (row dim, admission
// and eviction, initializer, gradient mean) are sound.
absl::Status ValidateSparseOptions(const TableSpec& spec) {
  const SparseTableOptions& so = spec.sparse();
  if (so.dim() <= 0 || so.dim() > (1 << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: sparse table ", spec.name(),
                     " needs a row dim in [1, 65536], got ", so.dim()));
  }
  if (so.admit_after() < 0 || so.evict_after_steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: sparse table ", spec.name(),
                     " has a negative admit_after or evict_after_steps"));
  }
  if (absl::Status s = ValidateRowInitializer(spec); !s.ok()) return s;
  if (absl::Status s = ValidateEviction(spec); !s.ok()) return s;
  if (absl::Status s = ValidateDiskTier(spec); !s.ok()) return s;
  if (!SparseTableOptions::GradientMean_IsValid(so.gradient_mean())) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: sparse table ", spec.name(),
                     " has unknown gradient_mean ", so.gradient_mean()));
  }
  return ValidateStorage(spec);
}

// The number of values of dense table `spec`, or INVALID_ARGUMENT for a bad
// or empty shape or a block size out of range.
absl::StatusOr<int64_t> DenseValueCount(const TableSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.shape()) {
    if (d <= 0 || n > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", spec.name(), " has a bad shape"));
    }
    n *= d;
  }
  if (spec.shape_size() == 0 || n == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitJob: table ", spec.name(), " is empty"));
  }
  if (spec.block_size() <= 0 || spec.block_size() > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: table ", spec.name(), " block_size must be in [1, 2^20]",
        ", got ", spec.block_size()));
  }
  return n;
}

// INVALID_ARGUMENT when `optimizer` needs table norms (LARS) that table
// `spec` of `job` cannot have.
absl::Status CheckTableNorms(const JobSpec& job, const TableSpec& spec,
                             const Optimizer& optimizer) {
  if (optimizer.needs_table_norms()) {
    // The trust ratio's norms meet through the trainers at sync step
    // boundaries (docs/tuning.md, "LARS"); async pushes and K of N have
    // none.
    if (spec.kind() != TableSpec::DENSE || job.mode() != SYNC ||
        job.replicas_to_aggregate() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", spec.name(),
          " has LARS, which needs a dense table in a SYNC job without "
          "replicas_to_aggregate"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status JobTables::DescribeTable(const JobSpec& job, int i, Table* t) {
  const TableSpec& spec = job.tables(i);
  auto opt = Optimizer::Create(spec.optimizer(), job.global_batch_size());
  if (spec.kind() == TableSpec::SPARSE) {
    if (absl::Status s = ValidateSparseOptions(spec); !s.ok()) return s;
  } else if (spec.kind() != TableSpec::DENSE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: table ", spec.name(), " has unknown kind ", spec.kind()));
  } else {
    absl::StatusOr<int64_t> n = DenseValueCount(spec);
    if (!n.ok()) return n.status();
    t->num_values = *n;
  }
  if (!opt.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: table ", spec.name(), ": ", opt.status().message()));
  }
  if (absl::Status s = CheckTableNorms(job, spec, **opt); !s.ok()) return s;
  if ((*opt)->rowwise() && spec.kind() != TableSpec::SPARSE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: dense table ", spec.name(), " has optimizer ",
        OptimizerConfig::Type_Name(spec.optimizer().type()),
        ", which keeps state per sparse row: use ADAGRAD or ADAM"));
  }
  t->spec = spec;
  t->optimizer = std::move(*opt);
  return absl::OkStatus();
}

int64_t DenseBytesPerValue(const Optimizer& optimizer) {
  // The value, the step's gradient sum, and the optimizer's state.
  return static_cast<int64_t>(sizeof(float)) * (2 + optimizer.num_slots());
}

int64_t UnitOverheadBytes(int num_trainers) {
  // StepBarrier's per-trainer counters, the unit and its lock.
  return int64_t{9} * num_trainers + 256;
}

absl::StatusOr<int64_t> JobTables::SizeBlocks(const std::vector<Table>& tables,
                                              absl::Span<const BlockId> blocks,
                                              int num_trainers,
                                              std::vector<int64_t>* sizes) {
  sizes->reserve(blocks.size());
  int64_t bytes = 0;
  const int64_t per_unit = UnitOverheadBytes(num_trainers);
  for (const BlockId& id : blocks) {
    if (id.table_id >= tables.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: block of unknown table id ", id.table_id));
    }
    const Table& t = tables[id.table_id];
    if (t.spec.kind() == TableSpec::SPARSE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", t.spec.name(), " is sparse and has no blocks"));
    }
    const int64_t nb = NumBlocks(t.num_values, t.spec.block_size());
    if (id.block >= nb) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", t.spec.name(), " has ", nb,
                       " blocks; there is no block ", id.block));
    }
    sizes->push_back(
        std::min(t.spec.block_size(),
                 t.num_values - int64_t{id.block} * t.spec.block_size()));
    bytes += sizes->back() * DenseBytesPerValue(*t.optimizer) + per_unit;
  }
  for (const Table& t : tables) {
    if (t.spec.kind() == TableSpec::SPARSE) bytes += per_unit;
  }
  absl::flat_hash_set<std::pair<uint32_t, uint32_t>> seen;
  for (const BlockId& id : blocks) {
    if (!seen.insert({id.table_id, id.block}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", tables[id.table_id].spec.name(),
                       " block ", id.block, " listed twice"));
    }
  }
  return bytes;
}

void JobTables::BuildUnits(absl::Span<const BlockId> blocks,
                           const std::vector<int64_t>& sizes,
                           const Membership* membership, int quorum,
                           MemoryBudget* budget,
                           absl::Span<const int> sparse_shards,
                           int64_t sparse_share,
                           std::vector<std::vector<DiskTier>> disk) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockId& id = blocks[i];
    Table& t = tables_[id.table_id];
    const int64_t size = sizes[i];
    auto b = std::make_unique<DenseTableBlock>(id.table_id, id.block, size,
                                               t.spec.name(), t.optimizer.get(),
                                               membership, quorum);
    t.blocks.emplace(id.block, std::move(b));
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    Table& t = tables_[i];
    for (auto& [index, b] : t.blocks) blocks_.push_back(b.get());
    if (t.spec.kind() == TableSpec::SPARSE) {
      sharded_sparse_ = !sparse_shards.empty();
      std::vector<int> shards(sparse_shards.begin(), sparse_shards.end());
      if (shards.empty()) shards.push_back(0);
      for (size_t k = 0; k < shards.size(); ++k) {
        DiskTier tier;
        if (k < disk[i].size()) tier = std::move(disk[i][k]);
        t.sparse.push_back(std::make_unique<SparseShard>(
            static_cast<uint32_t>(i), t.spec, t.optimizer.get(), membership,
            quorum, budget, static_cast<uint32_t>(shards[k]),
            !sparse_shards.empty(),
            tier.store != nullptr ? tier.row_share : sparse_share,
            std::move(tier.store)));
        sparse_.push_back(t.sparse.back().get());
      }
    }
  }
  std::sort(blocks_.begin(), blocks_.end(),
            [](const DenseTableBlock* a, const DenseTableBlock* b) {
              return a->LockedBefore(*b);
            });
  units_.assign(blocks_.begin(), blocks_.end());
  units_.insert(units_.end(), sparse_.begin(), sparse_.end());
}

int64_t JobTables::SparseShare(const JobSpec& job, const MemoryBudget* budget,
                               int64_t dense_bytes, size_t shards) {
  const int64_t limit = budget != nullptr ? budget->EffectiveLimit() : 0;
  int64_t units = 0;
  for (const TableSpec& t : job.tables()) {
    if (t.kind() == TableSpec::SPARSE) units += std::max<int64_t>(1, shards);
  }
  if (limit <= 0 || units == 0) return 0;
  return std::max<int64_t>(1, (limit - limit / 8 - dense_bytes) / units);
}

absl::Status JobTables::OpenDiskTiers(
    const std::vector<Table>& tables, size_t shards, int64_t sparse_share,
    const std::string& dir, std::vector<std::vector<DiskTier>>* disk) {
  // Each job's tables in a directory of their own: a job made again (or
  // another job) never meets this one's files.
  static std::atomic<int64_t> made{0};
  const int64_t n = made.fetch_add(1);
  disk->resize(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    const TableSpec& spec = tables[i].spec;
    if (spec.kind() != TableSpec::SPARSE || !spec.sparse().has_disk()) {
      continue;
    }
    if (dir.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "InitJob: sparse table ", spec.name(),
          " has a disk tier (disk { ... }), and this pserver has no "
          "--sparse_store_dir to keep its rows in"));
    }
    for (size_t k = 0; k < std::max<size_t>(1, shards); ++k) {
      ASSIGN_OR_RETURN(
          DiskTierPlan plan,
          PlanDiskTier(spec, sparse_share,
                       absl::StrCat(dir, "/job", n, "-table", i, "-shard", k)));
      ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store,
                       RowStore::Open(plan.store));
      LOG(INFO) << "sparse table " << spec.name() << ": rows beyond "
                << plan.row_share / double(1 << 20) << " MiB in memory go to "
                << store->dir() << " (RocksDB, "
                << store->MemoryBytes() / double(1 << 20) << " MiB of memory)";
      (*disk)[i].push_back(DiskTier{std::move(store), plan.row_share});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JobTables>> JobTables::Create(
    const JobSpec& job, absl::Span<const BlockId> blocks,
    const Membership* membership, MemoryBudget* budget,
    absl::Span<const int> sparse_shards, const std::string& sparse_store_dir) {
  std::unique_ptr<JobTables> jt(new JobTables);
  std::vector<Table>& tables = jt->tables_;
  tables.resize(job.tables_size());
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < job.tables_size(); ++i) {
    const std::string& name = job.tables(i).name();
    if (name.empty() || !names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", i, " has an empty or repeated name '", name, "'"));
    }
    if (absl::Status s = DescribeTable(job, i, &tables[i]); !s.ok()) return s;
  }
  // Every block checked, and the memory the job will hold here added up,
  // before anything is allocated.
  std::vector<int64_t> sizes;
  absl::StatusOr<int64_t> sized =
      SizeBlocks(tables, blocks, job.num_trainers(), &sizes);
  if (!sized.ok()) return sized.status();
  const int64_t bytes = *sized;
  if (budget != nullptr && !budget->TryReserve(bytes)) {
    const MemoryBudget::Bound b = budget->BoundFor(bytes);
    return absl::ResourceExhaustedError(absl::StrCat(
        "InitJob: the job's dense blocks, optimizer state and per-trainer "
        "state need ",
        bytes >> 20, " MiB on this pserver; ", b.flag, "=", b.limit >> 20,
        " and ", b.used >> 20, " MiB are held"));
  }
  jt->bytes_ = bytes;
  jt->budget_ = budget;
  jt->max_gradient_ = std::numeric_limits<float>::max() / job.num_trainers();
  const int64_t sparse_share =
      SparseShare(job, budget, bytes, sparse_shards.size());
  std::vector<std::vector<DiskTier>> disk;
  RETURN_IF_ERROR(OpenDiskTiers(tables, sparse_shards.size(), sparse_share,
                                sparse_store_dir, &disk));
  jt->BuildUnits(blocks, sizes, membership, job.replicas_to_aggregate(), budget,
                 sparse_shards, sparse_share, std::move(disk));
  return jt;
}

JobTables::~JobTables() {
  if (budget_ != nullptr) budget_->Release(bytes_);
}

absl::Status JobTables::ResolveDensePush(absl::Span<const BlockData> grads,
                                         int trainer_id, int64_t step,
                                         std::vector<PushPart>* parts) const {
  absl::Status st;
  parts->reserve(grads.size());
  for (size_t i = 0; st.ok() && i < grads.size(); ++i) {
    const BlockData& g = grads[i];
    auto b = g.unit != nullptr ? absl::StatusOr<DenseTableBlock*>(g.unit)
                               : FindBlock(g.table_id, g.block);
    if (!b.ok()) {
      st = b.status();
      break;
    }
    const std::string& name = spec(g.table_id).name();
    if (static_cast<int64_t>(g.values.size()) != (*b)->size()) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "table ", name, " block ", g.block, ": gradient has ",
          g.values.size(), " values, the block has ", (*b)->size()));
    } else if (!AllWithin(g.values.data(), g.values.size(), max_gradient_)) {
      st = absl::InvalidArgumentError(
          absl::StrCat("table ", name, " block ", g.block, ": gradient value ",
                       FirstOutOfRange(g.values, max_gradient_), " (trainer ",
                       trainer_id, ", step ", step, "); nothing was applied"));
    }
    parts->push_back(PushPart{*b, PushPayload{g.values, {}, 1}});
  }
  return st;
}

absl::Status JobTables::ResolveSparsePush(absl::Span<const SparseGrads> rows,
                                          int trainer_id, int64_t step,
                                          bool sync,
                                          std::vector<PushPart>* parts) const {
  absl::Status st;
  absl::flat_hash_set<uint64_t> seen;
  for (size_t i = 0; st.ok() && i < rows.size(); ++i) {
    const SparseGrads& r = rows[i];
    auto shard = FindSparse(r.table_id, r.shard);
    if (!shard.ok()) {
      st = shard.status();
      break;
    }
    const std::string& name = (*shard)->table_name();
    const size_t dim = static_cast<size_t>((*shard)->rows().dim());
    if (r.grads.size() != r.keys.size() * dim) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, ": ", r.keys.size(), " keys but ",
                       r.grads.size(), " values; rows have ", dim,
                       " values each (keys and values of different lengths)"));
    } else if (sync && (r.num_chunks < 1 || r.num_chunks > kMaxChunksPerStep)) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, ": num_chunks must be in [1, ",
                       kMaxChunksPerStep, "], got ", r.num_chunks));
    } else if (!AllWithin(r.grads.data(), r.grads.size(), max_gradient_)) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, ": gradient value ",
                       FirstOutOfRange(r.grads, max_gradient_), " (trainer ",
                       trainer_id, ", step ", step, "); nothing was applied"));
    }
    seen.clear();
    seen.reserve(r.keys.size());
    for (size_t j = 0; st.ok() && j < r.keys.size(); ++j) {
      if (!seen.insert(r.keys[j]).second) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "sparse table ", name, ": key ", r.keys[j],
            " appears twice in one push (the trainer sums a batch's "
            "gradients per key)"));
      }
    }
    parts->push_back(
        PushPart{*shard, PushPayload{r.grads, r.keys, r.num_chunks}});
  }
  return st;
}

absl::StatusOr<DenseTableBlock*> JobTables::FindBlock(uint32_t table_id,
                                                      uint32_t block) const {
  if (table_id >= tables_.size()) {
    return absl::NotFoundError(absl::StrCat("unknown table id ", table_id,
                                            ": the job has ", tables_.size(),
                                            " tables"));
  }
  const Table& t = tables_[table_id];
  auto it = t.blocks.find(block);
  if (it == t.blocks.end()) {
    return absl::NotFoundError(absl::StrCat("table ", t.spec.name(), " block ",
                                            block,
                                            " is not held by this pserver"));
  }
  return it->second.get();
}

absl::StatusOr<SparseShard*> JobTables::FindSparse(uint32_t table_id,
                                                   int shard) const {
  if (table_id >= tables_.size()) {
    return absl::NotFoundError(absl::StrCat("unknown table id ", table_id,
                                            ": the job has ", tables_.size(),
                                            " tables"));
  }
  const Table& t = tables_[table_id];
  if (t.sparse.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", t.spec.name(), " is dense; it has blocks, not keyed rows"));
  }
  // Without replication, or for what every shard shares (its width).
  if (!sharded_sparse_ || shard < 0) return t.sparse[0].get();
  for (const auto& s : t.sparse) {
    if (static_cast<int>(s->index()) == shard) return s.get();
  }
  return absl::NotFoundError(absl::StrCat("sparse table ", t.spec.name(),
                                          " shard ", shard,
                                          " is not held by this pserver"));
}

absl::flat_hash_map<uint32_t, int64_t> JobTables::BlockSizes(
    uint32_t table_id) const {
  absl::flat_hash_map<uint32_t, int64_t> sizes;
  for (const auto& [index, b] : tables_[table_id].blocks) {
    sizes[index] = b->size();
  }
  return sizes;
}

VersionRange JobTables::Versions() const {
  VersionRange r{INT64_MAX, 0};
  for (BarrierUnit* u : units_) {
    absl::MutexLock l(&u->mu);
    r.min = std::min(r.min, u->barrier.version());
    r.max = std::max(r.max, u->barrier.version());
  }
  if (r.min == INT64_MAX) r.min = 0;
  return r;
}

std::vector<SparseTableStats> JobTables::SparseStats() const {
  std::vector<SparseTableStats> out;
  for (const SparseShard* s : sparse_) {
    out.push_back(
        SparseTableStats{s->table_name(), s->index(), s->rows().counters(),
                         s->rows().MemoryBytes(), s->rows().storage()});
  }
  return out;
}

std::vector<TableProgress> JobTables::Progress() const {
  std::vector<TableProgress> out;
  absl::flat_hash_map<uint32_t, size_t> index;  // table id -> out[i]
  for (BarrierUnit* u : units_) {
    auto [it, added] = index.try_emplace(u->table_id(), out.size());
    if (added) {
      const TableSpec& table = spec(u->table_id());
      out.push_back(
          TableProgress{table.name(), table.kind() == TableSpec::SPARSE, 0});
    }
    if (const auto* shard = dynamic_cast<const SparseShard*>(u)) {
      out[it->second].non_finite_updates +=
          shard->rows().counters().non_finite_updates;
    }
    absl::MutexLock l(&u->mu);
    out[it->second].steps =
        std::max(out[it->second].steps, u->barrier.version());
    out[it->second].non_finite_updates += u->non_finite_updates;
  }
  return out;
}

size_t JobTables::HeldPulls() const {
  size_t n = 0;
  for (BarrierUnit* u : units_) {
    absl::MutexLock l(&u->mu);
    n += u->barrier.held();
  }
  return n;
}

}  // namespace shardps
