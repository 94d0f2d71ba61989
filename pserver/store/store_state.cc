#include "pserver/store/store_state.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/finite.h"

namespace shardps {

absl::Status NotReadyError() {
  return absl::FailedPreconditionError(
      "the job is not initialised on this pserver yet (the chief, trainer 0, "
      "sends the tables first)");
}

StoreState::StoreState(StoreOptions o)
    : options(std::move(o)),
      clock(options.clock),
      shared_budget(options.budget != nullptr ? options.budget
                                              : std::make_shared<MemoryBudget>(
                                                    options.max_memory_bytes)),
      budget(shared_budget.get()),
      waiters(options.clock, &forwarder) {}

absl::StatusOr<bool> StoreState::InitJob(const JobSpec& spec,
                                         absl::Span<const BlockId> blocks,
                                         absl::Span<const int> sparse_shards) {
  absl::MutexLock g(&gate);
  absl::MutexLock l(&init_mu);
  if (initialized) {
    std::string difference;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&difference);
    if (!differ.Compare(spec, job)) {
      ++rejected;
      // The first difference, as "modified: tables[0].shape[0]: 10 -> 12".
      difference = difference.substr(0, difference.find('\n'));
      return absl::FailedPreconditionError(absl::StrCat(
          "InitJob: this pserver already holds a job with a different spec (",
          difference,
          "; the running job's value comes second); restart the "
          "pserver to start a new job"));
    }
    return is_ready();
  }
  // Validate the whole spec before changing anything.
  RETURN_IF_ERROR(ValidateJob(spec, options.num_trainers));
  const bool is_sync = spec.mode() == SYNC;
  auto new_membership =
      std::make_unique<Membership>(spec.num_trainers(), is_sync);
  ASSIGN_OR_RETURN(std::unique_ptr<JobTables> new_tables,
                   JobTables::Create(spec, blocks, new_membership.get(), budget,
                                     sparse_shards, options.sparse_store_dir));
  size_t value_bytes = 0;
  for (const DenseTableBlock* b : new_tables->blocks()) {
    value_bytes += static_cast<size_t>(b->size()) * sizeof(float);
  }
  max_waiting_pulls = static_cast<size_t>(spec.num_trainers()) *
                      (value_bytes / options.pull_reply_bytes + 16);
  job = spec;
  sync = is_sync;
  membership = std::move(new_membership);
  tables = std::move(new_tables);
  staleness = std::make_unique<StalenessGate>(!sync, spec.max_staleness(),
                                              membership.get());
  init_blocks.assign(blocks.begin(), blocks.end());
  initialized = true;
  LOG(INFO) << "job initialised: " << (sync ? "sync" : "async") << ", "
            << spec.num_trainers() << " trainers, " << tables->num_tables()
            << " tables, " << blocks.size() << " blocks held here";
  return false;
}

absl::Status StoreState::AdoptPlacement(const ShardPlacement& p) {
  if (p.num_servers() <= 0) return absl::OkStatus();
  absl::MutexLock l(&init_mu);
  if (placement.num_servers() <= 0) {
    placement = p;
    return absl::OkStatus();
  }
  if (placement.server_index() == p.server_index() &&
      placement.num_servers() == p.num_servers() &&
      placement.scheme() == p.scheme()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "this pserver holds shard ", placement.server_index(), " of ",
      placement.num_servers(),
      " of the job, and the chief places it as "
      "pserver ",
      p.server_index(), " of ", p.num_servers(),
      ": it holds other blocks and keys. Give the trainers the pservers in "
      "the checkpoint's order and number, or reshard the checkpoint "
      "(tools/ps_checkpoint reshard, or start every pserver with an empty "
      "--checkpoint_dir and --restore_from; docs/fault_tolerance.md)"));
}

ShardPlacement StoreState::current_placement() const {
  absl::MutexLock l(&init_mu);
  return placement;
}

absl::Status StoreState::SetInitialValues(absl::Span<const BlockData> blocks) {
  absl::MutexLock l(&init_mu);
  if (!initialized) {
    return absl::FailedPreconditionError(
        "SetInitialValues before InitJob: the chief must send the job spec "
        "first");
  }
  if (is_ready()) return absl::OkStatus();  // trained values win
  std::vector<DenseTableBlock*> targets;
  for (const BlockData& d : blocks) {
    ASSIGN_OR_RETURN(DenseTableBlock * b,
                     tables->FindBlock(d.table_id, d.block));
    const std::string& name = tables->spec(d.table_id).name();
    if (static_cast<int64_t>(d.values.size()) != b->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetInitialValues: table ", name, " block ", d.block,
                       " has ", b->size(), " values, got ", d.values.size()));
    }
    if (!AllFinite(d.values.data(), d.values.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetInitialValues: table ", name, " block ", d.block,
                       " has a NaN or Inf value"));
    }
    targets.push_back(b);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    absl::MutexLock bl(&targets[i]->mu);
    targets[i]->SetInitialValue(blocks[i].values);
  }
  return absl::OkStatus();
}

absl::Status StoreState::CommitInit() {
  absl::MutexLock l(&init_mu);
  if (!initialized) {
    return absl::FailedPreconditionError("CommitInit before InitJob");
  }
  if (is_ready()) return absl::OkStatus();
  for (const BlockId& id : init_blocks) {
    DenseTableBlock* b = *tables->FindBlock(id.table_id, id.block);
    absl::MutexLock bl(&b->mu);
    if (!b->has_value) {
      return absl::FailedPreconditionError(
          absl::StrCat("CommitInit: table ", tables->spec(id.table_id).name(),
                       " block ", id.block, " has no initial value"));
    }
  }
  ready.store(true, std::memory_order_release);
  LOG(INFO) << "job ready: " << init_blocks.size() << " blocks";
  return absl::OkStatus();
}

size_t StoreState::num_blocks() const {
  absl::MutexLock l(&init_mu);
  return init_blocks.size();
}

absl::Status StoreState::CheckReadyAndTrainer(int trainer_id) const {
  if (!is_ready()) return NotReadyError();
  return membership->Touch(trainer_id, clock->Now());
}

absl::Status StoreState::CheckServes(const BarrierUnit& unit) const {
  UpdateForwarder* f = forwarder.load(std::memory_order_acquire);
  if (f == nullptr) return absl::OkStatus();
  return f->CheckServes(unit.table_id(), unit.index());
}

absl::StatusOr<BarrierUnit*> StoreState::FindUnit(uint32_t table_id,
                                                  uint32_t unit) const {
  if (table_id < static_cast<uint32_t>(job.tables_size()) &&
      job.tables(table_id).kind() == TableSpec::SPARSE) {
    return tables->FindSparse(table_id, static_cast<int>(unit));
  }
  return tables->FindBlock(table_id, unit);
}

absl::Status StoreState::Forward(const AppliedUpdates& applied, int trainer_id,
                                 uint64_t request_id, int64_t step) {
  if (applied.updates().empty()) return absl::OkStatus();
  UpdateForwarder* f = forwarder.load(std::memory_order_acquire);
  CHECK(f != nullptr) << "replicated units without a forwarder";
  std::vector<PushRef> refs;
  if (trainer_id >= 0) refs.push_back(PushRef{trainer_id, request_id, step});
  return f->Forward(applied.updates(), refs);
}

void StoreState::ReleaseAll(const std::vector<WaiterPtr>& released) {
  for (const WaiterPtr& w : released) waiters.Release(w);
}

absl::StatusOr<std::vector<DenseTableBlock*>> StoreState::ResolveBlocks(
    absl::Span<const BlockId> ids) {
  if (!is_ready()) {
    ++rejected;
    return NotReadyError();
  }
  std::vector<DenseTableBlock*> units;
  units.reserve(ids.size());
  for (const BlockId& id : ids) {
    absl::StatusOr<DenseTableBlock*> b =
        tables->FindBlock(id.table_id, id.block);
    if (!b.ok()) {
      ++rejected;
      return b.status();
    }
    units.push_back(*b);
  }
  return units;
}

absl::StatusOr<SparseShard*> StoreState::ResolveSparse(uint32_t table_id,
                                                       int shard) {
  absl::StatusOr<SparseShard*> s =
      is_ready() ? tables->FindSparse(table_id, shard)
                 : absl::StatusOr<SparseShard*>(NotReadyError());
  if (!s.ok()) ++rejected;
  return s;
}

std::string StoreState::DescribeWait(const PullWaiter& w) const {
  // Which trainers have not pushed the step this pull waits for.
  std::vector<int> missing;
  int64_t lowest = INT64_MAX;
  for (const PullTarget& t : w.targets) {
    if (!sync) break;
    absl::MutexLock l(&t.unit->mu);
    if (t.unit->barrier.version() >= w.min_version) continue;
    lowest = std::min(lowest, t.unit->barrier.version());
    t.unit->barrier.AppendMissing(&missing);
  }
  std::sort(missing.begin(), missing.end());
  std::string out;
  if (lowest != INT64_MAX) {
    out = absl::StrCat(
        w.norms_step >= 0 ? "the LARS norms of step " : "version ",
        w.norms_step >= 0 ? w.norms_step : w.min_version, " (a block is at ",
        lowest,
        missing.empty()
            ? "; every live trainer has pushed: the step is being applied, "
              "or, LARS, waits for its table norms)"
            : absl::StrCat("; waiting for the pushes of step ", lowest,
                           " from trainer(s) ", absl::StrJoin(missing, ","),
                           ")"));
  }
  const std::string gate = staleness->DescribeWait(w);
  if (!gate.empty()) absl::StrAppend(&out, out.empty() ? "" : "; ", gate);
  return out;
}

StoreCounters StoreState::counters() const {
  StoreCounters c;
  c.pushes = pushes.load();
  c.block_updates = updates.load();
  c.duplicate_block_pushes = duplicates.load();
  c.rejected_requests = rejected.load();
  c.pulls = pulls.load();
  c.pull_timeouts = pull_timeouts.load();
  c.late_block_pushes = late.load();
  c.rollbacks = rollbacks.load();
  if (is_ready()) {
    c.dropped_trainers = membership->dropped();
    c.rejoined_trainers = membership->rejoined();
  }
  return c;
}

}  // namespace shardps
