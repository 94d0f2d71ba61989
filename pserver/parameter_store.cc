#include "pserver/parameter_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "common/blob_io.h"
#include "common/shard_map.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/finite.h"
#include "kernels/vector_ops.h"

namespace shardps {

// One block of a dense table with its optimizer state and, in SYNC mode,
// the gradients accumulated for the step being assembled.
struct ParameterStore::Block {
  explicit Block(uint32_t table_id, uint32_t index, int64_t size)
      : table_id(table_id), index(index), size(size) {}
  const uint32_t table_id;
  const uint32_t index;
  const int64_t size;

  mutable absl::Mutex mu;
  bool has_value ABSL_GUARDED_BY(mu) = false;
  std::vector<float> value ABSL_GUARDED_BY(mu);
  std::vector<std::vector<float>> slots ABSL_GUARDED_BY(mu);
  int64_t version ABSL_GUARDED_BY(mu) = 0;  // updates applied
  // SYNC: the step `version` being assembled.
  std::vector<float> accum ABSL_GUARDED_BY(mu);
  std::vector<uint8_t> pushed ABSL_GUARDED_BY(mu);  // per trainer
  int num_pushed ABSL_GUARDED_BY(mu) = 0;
  absl::Time first_push ABSL_GUARDED_BY(mu);
  // Pulls waiting for a higher version.
  std::vector<std::pair<int64_t, std::shared_ptr<Waiter>>> waiters
      ABSL_GUARDED_BY(mu);
};

// A pull that has not been answered yet. `pending` counts what it still
// waits for: one per block below min_version, one for the staleness gate,
// and one held by Pull itself while it registers the others.
struct ParameterStore::Waiter {
  int trainer_id = 0;
  int64_t min_version = 0;
  int64_t step = 0;
  int64_t min_clock = 0;
  std::vector<Block*> blocks;
  std::vector<SparsePull> sparse;
  PullSink sink;
  PullDone done;
  absl::Time start;
  bool reported = false;  // guarded by waiters_mu_
  std::atomic<int> pending{0};
  std::atomic<bool> finished{false};
  std::atomic<bool> registered{false};  // in waiters_
};

ParameterStore::ParameterStore(StoreOptions options)
    : options_(std::move(options)) {}

ParameterStore::~ParameterStore() {
  CancelAllWaiters(absl::UnavailableError("pserver is shutting down"));
}

absl::StatusOr<bool> ParameterStore::InitJob(const JobSpec& job,
                                             absl::Span<const BlockId> blocks) {
  absl::MutexLock l(&init_mu_);
  if (initialized_) {
    if (!google::protobuf::util::MessageDifferencer::Equals(job, job_)) {
      ++rejected_;
      return absl::FailedPreconditionError(
          "InitJob: this pserver already holds a job with a different spec "
          "(tables, shapes, optimizers, mode or trainer count differ); "
          "restart the pserver to start a new job");
    }
    return ready();
  }
  // Validate the whole spec before changing anything.
  if (job.mode() != SYNC && job.mode() != ASYNC) {
    return absl::InvalidArgumentError("InitJob: mode must be SYNC or ASYNC");
  }
  if (job.num_trainers() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: num_trainers must be positive, got ", job.num_trainers()));
  }
  if (job.replicas_to_aggregate() < 0 ||
      job.replicas_to_aggregate() > job.num_trainers() ||
      (job.replicas_to_aggregate() > 0 && job.mode() != SYNC)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: replicas_to_aggregate must be in [0, num_trainers = ",
        job.num_trainers(), "] and needs SYNC mode, got ",
        job.replicas_to_aggregate()));
  }
  if (options_.num_trainers > 0 &&
      job.num_trainers() != options_.num_trainers) {
    return absl::FailedPreconditionError(absl::StrCat(
        "InitJob: the job has ", job.num_trainers(),
        " trainers but this pserver was started with --num_gradient_servers=",
        options_.num_trainers));
  }
  std::vector<Table> tables(job.tables_size());
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < job.tables_size(); ++i) {
    const TableSpec& spec = job.tables(i);
    if (spec.name().empty() || !names.insert(spec.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", i, " has an empty or repeated name '",
                       spec.name(), "'"));
    }
    if (spec.kind() == TableSpec::SPARSE) {
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
      auto opt = Optimizer::Create(spec.optimizer(), job.global_batch_size());
      if (!opt.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "InitJob: table ", spec.name(), ": ", opt.status().message()));
      }
      tables[i].spec = spec;
      tables[i].optimizer = std::move(*opt);
      tables[i].sparse =
          std::make_unique<SparseTable>(so, tables[i].optimizer.get());
      tables[i].sparse_step = std::make_unique<SparseStep>();
      continue;
    }
    if (spec.kind() != TableSpec::DENSE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", spec.name(), " has unknown kind ", spec.kind()));
    }
    int64_t n = 1;
    for (int64_t d : spec.shape()) {
      if (d <= 0 || n > (int64_t{1} << 40) / d) {
        return absl::InvalidArgumentError(
            absl::StrCat("InitJob: table ", spec.name(), " has a bad shape"));
      }
      n *= d;
    }
    if (spec.shape_size() == 0) n = 0;
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", spec.name(), " is empty"));
    }
    if (spec.block_size() <= 0 || spec.block_size() > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", spec.name(), " block_size must be in [1, 2^20]",
          ", got ", spec.block_size()));
    }
    auto opt = Optimizer::Create(spec.optimizer(), job.global_batch_size());
    if (!opt.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", spec.name(), ": ", opt.status().message()));
    }
    tables[i].spec = spec;
    tables[i].num_values = n;
    tables[i].optimizer = std::move(*opt);
  }
  for (const BlockId& id : blocks) {
    if (id.table_id >= tables.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: block of unknown table id ", id.table_id));
    }
    Table& t = tables[id.table_id];
    if (t.sparse != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "InitJob: table ", t.spec.name(), " is sparse and has no blocks"));
    }
    const int64_t nb = NumBlocks(t.num_values, t.spec.block_size());
    if (id.block >= nb) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", t.spec.name(), " has ", nb,
                       " blocks; there is no block ", id.block));
    }
    const int64_t size =
        std::min(t.spec.block_size(),
                 t.num_values - int64_t{id.block} * t.spec.block_size());
    auto b = std::make_unique<Block>(id.table_id, id.block, size);
    if (!t.blocks.emplace(id.block, std::move(b)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitJob: table ", t.spec.name(), " block ", id.block,
                       " listed twice"));
    }
  }
  job_ = job;
  tables_ = std::move(tables);
  num_trainers_ = job.num_trainers();
  quorum_ = job.replicas_to_aggregate();
  sync_ = job.mode() == SYNC;
  init_blocks_.assign(blocks.begin(), blocks.end());
  for (Table& t : tables_) {
    for (auto& [index, b] : t.blocks) all_blocks_.push_back(b.get());
  }
  std::sort(all_blocks_.begin(), all_blocks_.end(),
            [](const Block* a, const Block* b) {
              return std::make_pair(a->table_id, a->index) <
                     std::make_pair(b->table_id, b->index);
            });
  required_from_.reset(new std::atomic<int64_t>[num_trainers_]);
  last_seen_us_.reset(new std::atomic<int64_t>[num_trainers_]);
  for (int k = 0; k < num_trainers_; ++k) {
    required_from_[k].store(0);
    last_seen_us_[k].store(0);
  }
  {
    absl::MutexLock m(&members_mu_);
    members_.assign(num_trainers_, Member{});
    active_incarnation_.reset(new std::atomic<uint64_t>[num_trainers_]);
    for (int k = 0; k < num_trainers_; ++k) PublishMemberLocked(k);
  }
  {
    absl::MutexLock c(&clock_mu_);
    clocks_.assign(num_trainers_, 0);
  }
  for (Table& t : tables_) {
    if (t.sparse_step == nullptr) continue;
    absl::MutexLock sl(&t.sparse_step->mu);
    t.sparse_step->expected.assign(num_trainers_, 0);
    t.sparse_step->received.assign(num_trainers_, 0);
    t.sparse_step->done.assign(num_trainers_, 0);
  }
  initialized_ = true;
  LOG(INFO) << "job initialised: " << (sync_ ? "sync" : "async") << ", "
            << num_trainers_ << " trainers, " << tables_.size() << " tables, "
            << blocks.size() << " blocks held here";
  return false;
}

absl::Status ParameterStore::SetInitialValues(
    absl::Span<const BlockData> blocks) {
  absl::MutexLock l(&init_mu_);
  if (!initialized_) {
    return absl::FailedPreconditionError(
        "SetInitialValues before InitJob: the chief must send the job spec "
        "first");
  }
  if (ready()) return absl::OkStatus();  // trained values win
  for (const BlockData& d : blocks) {
    auto b = FindBlock(d.table_id, d.block);
    if (!b.ok()) return b.status();
    if (static_cast<int64_t>(d.values.size()) != (*b)->size) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetInitialValues: table ",
                       tables_[d.table_id].spec.name(), " block ", d.block,
                       " has ", (*b)->size, " values, got ", d.values.size()));
    }
    for (float v : d.values) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "SetInitialValues: table ", tables_[d.table_id].spec.name(),
            " block ", d.block, " has a NaN or Inf value"));
      }
    }
  }
  for (const BlockData& d : blocks) {
    Block* b = *FindBlock(d.table_id, d.block);
    const Optimizer& opt = *tables_[d.table_id].optimizer;
    absl::MutexLock bl(&b->mu);
    b->value.assign(d.values.begin(), d.values.end());
    b->slots.assign(opt.num_slots(),
                    std::vector<float>(b->size, opt.initial_slot_value()));
    b->has_value = true;
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::CommitInit() {
  absl::MutexLock l(&init_mu_);
  if (!initialized_) {
    return absl::FailedPreconditionError("CommitInit before InitJob");
  }
  if (ready()) return absl::OkStatus();
  for (const BlockId& id : init_blocks_) {
    Block* b = *FindBlock(id.table_id, id.block);
    absl::MutexLock bl(&b->mu);
    if (!b->has_value) {
      return absl::FailedPreconditionError(
          absl::StrCat("CommitInit: table ", tables_[id.table_id].spec.name(),
                       " block ", id.block, " has no initial value"));
    }
  }
  ready_.store(true, std::memory_order_release);
  LOG(INFO) << "job ready: " << init_blocks_.size() << " blocks";
  return absl::OkStatus();
}

absl::Status ParameterStore::CheckTrainerId(int trainer_id) const {
  if (trainer_id < 0 || trainer_id >= num_trainers_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer_id ", trainer_id, " is out of range: the job has ",
        num_trainers_, " trainers"));
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::CheckReadyAndTrainer(int trainer_id) const {
  if (!ready()) {
    return absl::FailedPreconditionError(
        "the job is not initialised on this pserver yet (the chief, trainer "
        "0, sends the tables first)");
  }
  RETURN_IF_ERROR(CheckTrainerId(trainer_id));
  last_seen_us_[trainer_id].store(absl::ToUnixMicros(absl::Now()),
                                  std::memory_order_relaxed);
  if (required_from_[trainer_id].load() == INT64_MAX) {
    absl::MutexLock m(&members_mu_);
    if (members_[trainer_id].state == MemberState::kDropped) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer ", trainer_id,
          " was dropped from the job after --trainer_timeout without a "
          "word; restart it to rejoin"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ParameterStore::Block*> ParameterStore::FindBlock(
    uint32_t table_id, uint32_t block) const {
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

void ParameterStore::ApplyUpdate(const Table& t, Block* b, int64_t step,
                                 float scale, absl::Span<const float> grad) {
  std::vector<absl::Span<float>> slots;
  slots.reserve(b->slots.size());
  for (auto& s : b->slots) slots.push_back(absl::MakeSpan(s));
  t.optimizer->Apply(step, b->version, scale, grad, absl::MakeSpan(b->value),
                     slots);
  ++b->version;
  ++block_updates_;
}

absl::Status ParameterStore::Push(int trainer_id, int64_t step,
                                  absl::Span<const BlockData> grads,
                                  uint64_t generation, int* late_blocks) {
  if (late_blocks != nullptr) *late_blocks = 0;
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() && step < 0) {
    st = absl::InvalidArgumentError(absl::StrCat("negative step ", step));
  }
  // Validate everything that needs no block lock.
  std::vector<std::pair<Block*, const BlockData*>> work;
  work.reserve(grads.size());
  for (size_t i = 0; st.ok() && i < grads.size(); ++i) {
    const BlockData& g = grads[i];
    auto b = FindBlock(g.table_id, g.block);
    if (!b.ok()) {
      st = b.status();
      break;
    }
    const std::string& name = tables_[g.table_id].spec.name();
    if (static_cast<int64_t>(g.values.size()) != (*b)->size) {
      st = absl::InvalidArgumentError(
          absl::StrCat("table ", name, " block ", g.block, ": gradient has ",
                       g.values.size(), " values, the block has ", (*b)->size));
      break;
    }
    const float* gv = g.values.data();
    const bool finite = AllFinite(gv, g.values.size());
    for (size_t j = 0; !finite && j < g.values.size(); ++j) {
      if (!std::isfinite(gv[j])) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "table ", name, " block ", g.block, ": gradient value ", j, " is ",
            std::isnan(gv[j]) ? "NaN" : "Inf", " (trainer ", trainer_id,
            ", step ", step, "); nothing was applied"));
        break;
      }
    }
    if (!st.ok()) break;
    work.emplace_back(*b, &g);
  }
  if (st.ok()) {
    std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) {
      return std::make_pair(a.first->table_id, a.first->index) <
             std::make_pair(b.first->table_id, b.first->index);
    });
    for (size_t i = 1; i < work.size(); ++i) {
      if (work[i].first == work[i - 1].first) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "table ", tables_[work[i].first->table_id].spec.name(), " block ",
            work[i].first->index, " appears twice in one push"));
        break;
      }
    }
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }

  // Lock the blocks in (table, block) order, check the step, then apply:
  // all or nothing.
  for (auto& w : work) w.first->mu.Lock();
  std::vector<std::shared_ptr<Waiter>> ready_waiters;
  std::vector<uint8_t> late(work.size(), 0);
  st = CheckGeneration("push", generation);
  if (!st.ok()) {
    // another timeline: nothing is applied
  } else if (sync_) {
    for (size_t i = 0; i < work.size(); ++i) {
      Block* b = work[i].first;
      b->mu.AssertHeld();
      if (step < b->version && quorum_ > 0) {
        late[i] = 1;  // the step went ahead without this push
        continue;
      }
      if (step != b->version) {
        const std::string& name = tables_[b->table_id].spec.name();
        st = absl::FailedPreconditionError(
            step < b->version
                ? absl::StrCat("push for step ", step, " of table ", name,
                               " block ", b->index,
                               " refused: that step was already applied "
                               "(the block is at version ",
                               b->version, ")")
                : absl::StrCat("push for step ", step, " of table ", name,
                               " block ", b->index,
                               " refused: the block is still at step ",
                               b->version, " (pull with min_version first)"));
        break;
      }
    }
    if (st.ok()) {
      const absl::Time now = absl::Now();
      for (size_t i = 0; i < work.size(); ++i) {
        Block* b = work[i].first;
        b->mu.AssertHeld();
        if (late[i]) {
          ++late_;
          if (late_blocks != nullptr) ++*late_blocks;
          continue;
        }
        const Table& t = tables_[b->table_id];
        if (b->pushed.empty()) b->pushed.assign(num_trainers_, 0);
        if (b->pushed[trainer_id]) {
          ++duplicate_block_pushes_;
          continue;
        }
        const absl::Span<const float> g = work[i].second->values;
        if (num_trainers_ == 1) {
          ApplyUpdate(t, b, step, 1.0f, g);
        } else {
          if (b->num_pushed == 0) {
            b->accum.assign(g.begin(), g.end());
            b->first_push = now;
          } else {
            AddInto(b->accum.data(), g.data(), g.size());
          }
          b->pushed[trainer_id] = 1;
          ++b->num_pushed;
          if (!StepComplete(b->pushed, b->num_pushed, b->version)) continue;
          ApplyUpdate(t, b, step, 1.0f / b->num_pushed, b->accum);
          b->num_pushed = 0;
          std::fill(b->pushed.begin(), b->pushed.end(), 0);
        }
        TakeReadyWaiters(b, &ready_waiters);
      }
    }
  } else {
    for (auto& w : work) {
      Block* b = w.first;
      b->mu.AssertHeld();
      ApplyUpdate(tables_[b->table_id], b, step, 1.0f, w.second->values);
    }
  }
  for (auto it = work.rbegin(); it != work.rend(); ++it) it->first->mu.Unlock();
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  ++pushes_;
  for (auto& w : ready_waiters) Release(w);

  if (!sync_) AdvanceClock(trainer_id, step);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParameterStore::BlockSize(uint32_t table_id,
                                                  uint32_t block) const {
  if (!ready()) {
    return absl::FailedPreconditionError(
        "the job is not initialised on this pserver yet (the chief, trainer "
        "0, sends the tables first)");
  }
  auto b = FindBlock(table_id, block);
  if (!b.ok()) return b.status();
  return (*b)->size;
}

absl::StatusOr<int> ParameterStore::SparseDim(uint32_t table_id) const {
  if (!ready()) {
    return absl::FailedPreconditionError(
        "the job is not initialised on this pserver yet (the chief, trainer "
        "0, sends the tables first)");
  }
  if (table_id >= tables_.size()) {
    return absl::NotFoundError(absl::StrCat("unknown table id ", table_id,
                                            ": the job has ", tables_.size(),
                                            " tables"));
  }
  const Table& t = tables_[table_id];
  if (t.sparse == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", t.spec.name(), " is dense; it has blocks, not keyed rows"));
  }
  return t.sparse->dim();
}

absl::Status ParameterStore::PushSparse(int trainer_id, int64_t step,
                                        absl::Span<const SparseGrads> rows,
                                        uint64_t generation) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() && step < 0) {
    st = absl::InvalidArgumentError(absl::StrCat("negative step ", step));
  }
  // Validate the whole request first.
  absl::flat_hash_set<uint64_t> seen;
  std::vector<uint32_t> table_ids;
  for (size_t i = 0; st.ok() && i < rows.size(); ++i) {
    const SparseGrads& r = rows[i];
    auto dim = SparseDim(r.table_id);
    if (!dim.ok()) {
      st = dim.status();
      break;
    }
    const std::string& name = tables_[r.table_id].spec.name();
    if (r.grads.size() != r.keys.size() * static_cast<size_t>(*dim)) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, ": ", r.keys.size(), " keys but ",
                       r.grads.size(), " values; rows have ", *dim,
                       " values each (keys and values of different lengths)"));
      break;
    }
    if (sync_ && r.num_chunks < 1) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name,
                       ": num_chunks must be at least 1, got ", r.num_chunks));
      break;
    }
    if (!AllFinite(r.grads.data(), r.grads.size())) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "sparse table ", name, ": a gradient value is NaN or Inf (trainer ",
          trainer_id, ", step ", step, "); nothing was applied"));
      break;
    }
    seen.clear();
    for (uint64_t k : r.keys) {
      if (!seen.insert(k).second) {
        st = absl::InvalidArgumentError(absl::StrCat(
            "sparse table ", name, ": key ", k,
            " appears twice in one push (the trainer sums a batch's "
            "gradients per key)"));
        break;
      }
    }
    if (std::find(table_ids.begin(), table_ids.end(), r.table_id) !=
        table_ids.end()) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, " appears twice in one push"));
    }
    table_ids.push_back(r.table_id);
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  // Order by table for the locks; then check steps, then apply.
  std::vector<const SparseGrads*> work;
  for (const SparseGrads& r : rows) work.push_back(&r);
  std::sort(work.begin(), work.end(), [](const auto* a, const auto* b) {
    return a->table_id < b->table_id;
  });
  for (const SparseGrads* r : work) tables_[r->table_id].sparse_step->mu.Lock();
  std::vector<std::shared_ptr<Waiter>> ready_waiters;
  std::vector<uint8_t> late(work.size(), 0);
  st = CheckGeneration("push", generation);
  for (size_t i = 0; st.ok() && i < work.size(); ++i) {
    const SparseGrads* r = work[i];
    SparseStep& ss = *tables_[r->table_id].sparse_step;
    ss.mu.AssertHeld();
    if (!sync_) break;
    const std::string& name = tables_[r->table_id].spec.name();
    if (step < ss.version && quorum_ > 0) {
      late[i] = 1;
      continue;
    }
    if (step != ss.version) {
      st = absl::FailedPreconditionError(
          step < ss.version
              ? absl::StrCat("push for step ", step, " of sparse table ", name,
                             " refused: that step was already applied "
                             "(the table is at version ",
                             ss.version, ")")
              : absl::StrCat("push for step ", step, " of sparse table ", name,
                             " refused: the table is still at step ",
                             ss.version, " (pull with min_version first)"));
      break;
    }
    if (ss.expected[trainer_id] != 0 &&
        ss.expected[trainer_id] != r->num_chunks) {
      st = absl::InvalidArgumentError(
          absl::StrCat("sparse table ", name, ": trainer ", trainer_id,
                       " announced ", ss.expected[trainer_id],
                       " chunks for step ", step, ", now ", r->num_chunks));
      break;
    }
  }
  if (st.ok()) {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < work.size(); ++i) {
      const SparseGrads* r = work[i];
      Table& t = tables_[r->table_id];
      SparseStep& ss = *t.sparse_step;
      ss.mu.AssertHeld();
      if (late[i]) {
        ++late_;
        continue;
      }
      if (!sync_) {
        const float one[] = {1.0f};
        t.sparse->Apply(step, r->keys, r->grads, one);
        ++ss.version;
        const int64_t every =
            std::max<int64_t>(1, t.spec.sparse().evict_after_steps() / 2);
        if (t.spec.sparse().evict_after_steps() > 0 &&
            step >= ss.last_evict_step + every) {
          ss.last_evict_step = step;
          const int64_t n = t.sparse->Evict(step);
          if (n > 0) {
            LOG(INFO) << "sparse table " << t.spec.name() << ": evicted " << n
                      << " rows not updated since step "
                      << step - t.spec.sparse().evict_after_steps();
          }
        }
        continue;
      }
      if (ss.expected[trainer_id] != 0 &&
          ss.received[trainer_id] >= ss.expected[trainer_id]) {
        ++duplicate_block_pushes_;  // a chunk beyond the count: a repeat
        continue;
      }
      if (ss.trainers_done == 0 &&
          std::all_of(ss.received.begin(), ss.received.end(),
                      [](int32_t x) { return x == 0; })) {
        ss.first_push = now;
      }
      ss.expected[trainer_id] = r->num_chunks;
      t.sparse->Accumulate(r->keys, r->grads);
      if (++ss.received[trainer_id] < ss.expected[trainer_id]) continue;
      ++ss.trainers_done;
      ss.done[trainer_id] = 1;
      if (!StepComplete(ss.done, ss.trainers_done, ss.version)) continue;
      ApplySparseStep(t, ss, &ready_waiters);
    }
  }
  for (auto it = work.rbegin(); it != work.rend(); ++it) {
    tables_[(*it)->table_id].sparse_step->mu.Unlock();
  }
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  ++pushes_;
  for (auto& w : ready_waiters) Release(w);
  if (!sync_) AdvanceClock(trainer_id, step);
  return absl::OkStatus();
}

void ParameterStore::TakeReadyWaiters(
    Block* b, std::vector<std::shared_ptr<Waiter>>* ready) {
  auto& ws = b->waiters;
  auto keep = std::partition(ws.begin(), ws.end(), [b](const auto& p) {
    b->mu.AssertHeld();
    return p.first > b->version;
  });
  for (auto it = keep; it != ws.end(); ++it) {
    ready->push_back(std::move(it->second));
  }
  ws.erase(keep, ws.end());
}

void ParameterStore::ApplySparseStep(
    Table& t, SparseStep& ss, std::vector<std::shared_ptr<Waiter>>* ready) {
  ss.mu.AssertHeld();
  t.sparse->ApplyAccumulated(ss.version);
  ++ss.version;
  ++block_updates_;
  ss.trainers_done = 0;
  std::fill(ss.expected.begin(), ss.expected.end(), 0);
  std::fill(ss.received.begin(), ss.received.end(), 0);
  std::fill(ss.done.begin(), ss.done.end(), 0);
  if (t.spec.sparse().evict_after_steps() > 0) {
    const int64_t n = t.sparse->Evict(ss.version);
    if (n > 0) {
      LOG(INFO) << "sparse table " << t.spec.name() << ": evicted " << n
                << " rows not updated since step "
                << ss.version - t.spec.sparse().evict_after_steps();
    }
  }
  auto& ws = ss.waiters;
  auto keep = std::partition(ws.begin(), ws.end(), [&ss](const auto& p) {
    ss.mu.AssertHeld();
    return p.first > ss.version;
  });
  for (auto it = keep; it != ws.end(); ++it) {
    ready->push_back(std::move(it->second));
  }
  ws.erase(keep, ws.end());
}

bool ParameterStore::StepComplete(const std::vector<uint8_t>& done,
                                  int num_done, int64_t version) const {
  if (num_done == 0) return false;
  if (quorum_ > 0 && num_done >= quorum_) return true;
  for (int k = 0; k < num_trainers_; ++k) {
    if (!done[k] && version >= required_from_[k].load()) return false;
  }
  return true;
}

void ParameterStore::RecheckBarriers() {
  if (!ready()) return;
  std::vector<std::shared_ptr<Waiter>> ready_waiters;
  if (sync_) {
    for (Block* b : all_blocks_) {
      absl::MutexLock bl(&b->mu);
      if (b->num_pushed == 0 ||
          !StepComplete(b->pushed, b->num_pushed, b->version)) {
        continue;
      }
      ApplyUpdate(tables_[b->table_id], b, b->version, 1.0f / b->num_pushed,
                  b->accum);
      b->num_pushed = 0;
      std::fill(b->pushed.begin(), b->pushed.end(), 0);
      TakeReadyWaiters(b, &ready_waiters);
    }
    for (Table& t : tables_) {
      if (t.sparse_step == nullptr) continue;
      SparseStep& ss = *t.sparse_step;
      absl::MutexLock sl(&ss.mu);
      if (StepComplete(ss.done, ss.trainers_done, ss.version)) {
        ApplySparseStep(t, ss, &ready_waiters);
      }
    }
  } else {
    absl::MutexLock c(&clock_mu_);
    ready_waiters = TakeClockReady();
  }
  for (auto& w : ready_waiters) Release(w);
}

std::vector<std::shared_ptr<ParameterStore::Waiter>>
ParameterStore::TakeClockReady() {
  auto keep = std::partition(stale_waiters_.begin(), stale_waiters_.end(),
                             [this](const std::shared_ptr<Waiter>& w) {
                               clock_mu_.AssertHeld();
                               return !ClockGateOk(*w);
                             });
  std::vector<std::shared_ptr<Waiter>> ready(keep, stale_waiters_.end());
  stale_waiters_.erase(keep, stale_waiters_.end());
  return ready;
}

void ParameterStore::LockAll() const {
  for (Block* b : all_blocks_) b->mu.Lock();
  for (const Table& t : tables_) {
    if (t.sparse_step != nullptr) t.sparse_step->mu.Lock();
  }
}

void ParameterStore::UnlockAll() const {
  for (auto it = tables_.rbegin(); it != tables_.rend(); ++it) {
    if (it->sparse_step != nullptr) it->sparse_step->mu.Unlock();
  }
  for (auto it = all_blocks_.rbegin(); it != all_blocks_.rend(); ++it) {
    (*it)->mu.Unlock();
  }
}

int64_t ParameterStore::MaxVersionLocked() const {
  int64_t v = 0;
  for (Block* b : all_blocks_) {
    b->mu.AssertHeld();
    v = std::max(v, b->version);
  }
  for (const Table& t : tables_) {
    if (t.sparse_step == nullptr) continue;
    t.sparse_step->mu.AssertHeld();
    v = std::max(v, t.sparse_step->version);
  }
  return v;
}

absl::StatusOr<RegisterResult> ParameterStore::Register(int trainer_id,
                                                        uint64_t incarnation,
                                                        absl::Time now) {
  RegisterResult r;
  r.job_ready = ready();
  r.generation = generation_.load();
  if (!r.job_ready) return r;  // everyone is expected from the start
  RETURN_IF_ERROR(CheckTrainerId(trainer_id));
  bool rejoined = false;
  {
    absl::MutexLock m(&members_mu_);
    RegisterLocked(trainer_id, incarnation, now, &r, &rejoined);
  }
  // A rejoin at join_step may complete a step that waited for the previous
  // incarnation.
  if (rejoined) RecheckBarriers();
  return r;
}

void ParameterStore::RegisterLocked(int trainer_id, uint64_t incarnation,
                                    absl::Time now, RegisterResult* out,
                                    bool* rejoined) {
  RegisterResult& r = *out;
  Member& mem = members_[trainer_id];
  last_seen_us_[trainer_id].store(absl::ToUnixMicros(now));
  if (mem.state == MemberState::kExpected ||
      (mem.state == MemberState::kActive &&
       (mem.incarnation == incarnation || mem.incarnation == 0))) {
    mem.state = MemberState::kActive;
    mem.incarnation = incarnation;
    PublishMemberLocked(trainer_id);
    r.join_step = required_from_[trainer_id].load();
    if (!sync_) {
      absl::MutexLock c(&clock_mu_);
      r.join_step = clocks_[trainer_id];
    }
    return;
  }
  // A rejoin: a new incarnation, or a trainer that was dropped or left.
  const char* was = mem.state == MemberState::kDropped ? "dropped"
                    : mem.state == MemberState::kLeft  ? "gone"
                                                       : "running";
  if (sync_) {
    LockAll();
    r.join_step = MaxVersionLocked() + 1;
    required_from_[trainer_id].store(r.join_step);
    UnlockAll();
  } else {
    absl::MutexLock c(&clock_mu_);
    r.join_step = clocks_[trainer_id];
    required_from_[trainer_id].store(0);
  }
  mem.state = MemberState::kActive;
  mem.incarnation = incarnation;
  PublishMemberLocked(trainer_id);
  ++rejoined_;
  *rejoined = true;
  LOG(WARNING) << "trainer " << trainer_id << " rejoined (incarnation "
               << incarnation << "; it was " << was << "): "
               << (sync_ ? "the barrier waits for it from step "
                         : "it resumes at step ")
               << r.join_step;
}

absl::Status ParameterStore::ConfirmJoin(int trainer_id, uint64_t incarnation,
                                         int64_t start_step) {
  RETURN_IF_ERROR(CheckReadyAndTrainer(trainer_id));
  if (start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative start_step ", start_step));
  }
  {
    absl::MutexLock m(&members_mu_);
    const Member& mem = members_[trainer_id];
    if (mem.state != MemberState::kActive || mem.incarnation != incarnation) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer ", trainer_id, " incarnation ", incarnation,
          " confirms a join it did not register for (register first)"));
    }
    if (!sync_) return absl::OkStatus();
    const int64_t from = required_from_[trainer_id].load();
    if (start_step <= from) return absl::OkStatus();
    required_from_[trainer_id].store(start_step);
  }
  RecheckBarriers();
  return absl::OkStatus();
}

absl::Status ParameterStore::Heartbeat(int trainer_id, uint64_t incarnation,
                                       absl::Time now) {
  if (!ready()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckTrainerId(trainer_id));
  absl::MutexLock m(&members_mu_);
  Member& mem = members_[trainer_id];
  if (mem.state == MemberState::kExpected ||
      (mem.state == MemberState::kActive && mem.incarnation == 0)) {
    // First word since this store started (or restarted from a checkpoint).
    mem.state = MemberState::kActive;
    mem.incarnation = incarnation;
    PublishMemberLocked(trainer_id);
  }
  if (mem.incarnation != incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer ", trainer_id, " incarnation ", incarnation,
                     " was replaced by incarnation ", mem.incarnation,
                     " (a restarted process with the same --trainer_id)"));
  }
  if (mem.state == MemberState::kDropped) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer ", trainer_id,
        " was dropped from the job after --trainer_timeout without a word; "
        "restart it to rejoin"));
  }
  last_seen_us_[trainer_id].store(absl::ToUnixMicros(now));
  return absl::OkStatus();
}

absl::Status ParameterStore::Leave(int trainer_id, uint64_t incarnation) {
  if (!ready()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckTrainerId(trainer_id));
  {
    absl::MutexLock m(&members_mu_);
    Member& mem = members_[trainer_id];
    if (mem.state != MemberState::kExpected && mem.incarnation != 0 &&
        mem.incarnation != incarnation) {
      return absl::FailedPreconditionError(
          absl::StrCat("trainer ", trainer_id, " incarnation ", incarnation,
                       " was replaced by incarnation ", mem.incarnation));
    }
    if (mem.state == MemberState::kLeft) return absl::OkStatus();
    mem.state = MemberState::kLeft;
    mem.incarnation = incarnation;
    PublishMemberLocked(trainer_id);
    required_from_[trainer_id].store(INT64_MAX);
  }
  LOG(INFO) << "trainer " << trainer_id << " left the job";
  RecheckBarriers();
  return absl::OkStatus();
}

absl::Status ParameterStore::CheckGeneration(absl::string_view what,
                                             uint64_t generation) const {
  if (!sync_ || generation == kAnyGeneration ||
      generation == generation_.load()) {
    return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat(
      what, " from generation ", generation, ": this pserver is on generation ",
      generation_.load(), ", restarted from step ", base_step_.load(),
      "; the trainer must recover"));
}

void ParameterStore::PublishMemberLocked(int k) {
  const Member& mem = members_[k];
  active_incarnation_[k].store(
      mem.state == MemberState::kActive ? mem.incarnation : 0);
}

absl::Status ParameterStore::CheckIncarnation(int trainer_id,
                                              uint64_t incarnation) const {
  if (incarnation == 0 || !ready() || trainer_id < 0 ||
      trainer_id >= num_trainers_) {
    return absl::OkStatus();  // the request's other checks will answer
  }
  // Lock-free: this runs for every pull and push.
  const uint64_t known = active_incarnation_[trainer_id].load();
  if (known != 0 && known != incarnation) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer ", trainer_id, " incarnation ", incarnation,
        " was replaced by incarnation ", known,
        " (a restarted process with the same --trainer_id); this process "
        "must stop"));
  }
  return absl::OkStatus();
}

std::vector<int> ParameterStore::LiveTrainers() const {
  std::vector<int> live;
  for (int k = 0; k < num_trainers_ && ready(); ++k) {
    if (required_from_[k].load() != INT64_MAX) live.push_back(k);
  }
  return live;
}

void ParameterStore::AdvanceClock(int trainer_id, int64_t step) {
  std::vector<std::shared_ptr<Waiter>> released;
  {
    absl::MutexLock c(&clock_mu_);
    clocks_[trainer_id] = std::max(clocks_[trainer_id], step + 1);
    released = TakeClockReady();
  }
  for (auto& w : released) Release(w);
}

bool ParameterStore::ClockGateOk(const Waiter& w) const {
  if (sync_) return true;
  const int s = job_.max_staleness();
  // The slowest trainer still in the job (not dropped, not gone).
  int64_t slowest = INT64_MAX;
  for (int k = 0; k < num_trainers_; ++k) {
    if (required_from_[k].load() != INT64_MAX) {
      slowest = std::min(slowest, clocks_[k]);
    }
  }
  return (s < 0 || w.step - slowest <= s) && slowest >= w.min_clock;
}

void ParameterStore::Pull(int trainer_id, int64_t min_version, int64_t step,
                          int64_t min_clock, absl::Span<const BlockId> blocks,
                          absl::Span<const SparsePull> sparse, PullSink sink,
                          PullDone done, uint64_t generation) {
  absl::Status st = CheckReadyAndTrainer(trainer_id);
  if (st.ok() && (min_version < 0 || step < 0 || min_clock < 0)) {
    st = absl::InvalidArgumentError(
        "negative min_version, step or min_clock in pull");
  }
  if (st.ok()) st = CheckGeneration("pull", generation);
  auto w = std::make_shared<Waiter>();
  for (size_t i = 0; st.ok() && i < blocks.size(); ++i) {
    auto b = FindBlock(blocks[i].table_id, blocks[i].block);
    if (!b.ok()) {
      st = b.status();
      break;
    }
    w->blocks.push_back(*b);
  }
  for (size_t i = 0; st.ok() && i < sparse.size(); ++i) {
    st = SparseDim(sparse[i].table_id).status();
    w->sparse.push_back(sparse[i]);
  }
  if (!st.ok()) {
    ++rejected_;
    done(st, absl::ZeroDuration());
    return;
  }
  ++pulls_;
  w->trainer_id = trainer_id;
  w->min_version = min_version;
  w->step = step;
  w->min_clock = min_clock;
  w->sink = std::move(sink);
  w->done = std::move(done);
  w->start = absl::Now();
  // One unit per block and sparse table, one for the staleness gate, one
  // held here.
  w->pending.store(static_cast<int>(w->blocks.size() + w->sparse.size()) + 2);
  {
    absl::MutexLock c(&clock_mu_);
    if (ClockGateOk(*w)) {
      w->pending.fetch_sub(1);
    } else {
      stale_waiters_.push_back(w);
    }
  }
  // The generation is checked again under each lock: a rollback holds them
  // all, so a pull is either registered before it (and aborted by it) or
  // sees the new generation.
  bool aborted = false;
  for (Block* b : w->blocks) {
    absl::MutexLock bl(&b->mu);
    if (!CheckGeneration("pull", generation).ok()) {
      aborted = true;
      break;
    }
    if (b->version >= min_version) {
      w->pending.fetch_sub(1);
    } else {
      b->waiters.emplace_back(min_version, w);
    }
  }
  for (size_t i = 0; !aborted && i < w->sparse.size(); ++i) {
    SparseStep& ss = *tables_[w->sparse[i].table_id].sparse_step;
    absl::MutexLock sl(&ss.mu);
    if (!CheckGeneration("pull", generation).ok()) {
      aborted = true;
      break;
    }
    if (!sync_ || ss.version >= min_version) {
      w->pending.fetch_sub(1);
    } else {
      ss.waiters.emplace_back(min_version, w);
    }
  }
  if (aborted) {
    Finish(w, CheckGeneration("pull", generation));
    return;
  }
  if (w->pending.fetch_sub(1) == 1) {
    Complete(w);  // the fast path: nothing to wait for, no store-wide lock
    return;
  }
  // It waits: register it for time-outs, reports and shutdown.
  bool closed = false;
  {
    absl::MutexLock l(&waiters_mu_);
    closed = closed_;
    if (!closed) {
      waiters_.insert(w);
      w->registered.store(true);
    }
  }
  if (closed) {
    Finish(w, absl::UnavailableError("pserver is shutting down"));
  } else if (w->finished.load()) {
    // Completed between the registrations above and the insert: Complete
    // may not have seen `registered`, so remove it here.
    absl::MutexLock l(&waiters_mu_);
    waiters_.erase(w);
  }
}

void ParameterStore::Release(const std::shared_ptr<Waiter>& w) {
  if (w->pending.fetch_sub(1) == 1) Complete(w);
}

void ParameterStore::Complete(const std::shared_ptr<Waiter>& w) {
  if (w->finished.exchange(true)) return;
  for (Block* b : w->blocks) {
    absl::MutexLock bl(&b->mu);
    w->sink(b->table_id, b->index, b->version, b->value);
  }
  for (const SparsePull& sp : w->sparse) {
    tables_[sp.table_id].sparse->Read(sp.keys, sp.out);
  }
  if (w->registered.load()) {
    absl::MutexLock l(&waiters_mu_);
    waiters_.erase(w);
  }
  w->done(absl::OkStatus(), absl::Now() - w->start);
}

void ParameterStore::Finish(const std::shared_ptr<Waiter>& w,
                            absl::Status status) {
  if (w->finished.exchange(true)) return;
  if (w->registered.load()) {
    absl::MutexLock l(&waiters_mu_);
    waiters_.erase(w);
  }
  w->done(std::move(status), absl::Now() - w->start);
}

std::string ParameterStore::DescribeWait(const Waiter& w) const {
  // Which trainers have not pushed the step this pull waits for.
  std::vector<int> missing;
  int64_t lowest = INT64_MAX;
  for (Block* b : w.blocks) {
    absl::MutexLock bl(&b->mu);
    if (b->version >= w.min_version) continue;
    lowest = std::min(lowest, b->version);
    for (int k = 0; k < num_trainers_; ++k) {
      if (b->version < required_from_[k].load()) continue;
      if ((b->pushed.empty() || !b->pushed[k]) &&
          std::find(missing.begin(), missing.end(), k) == missing.end()) {
        missing.push_back(k);
      }
    }
  }
  for (const SparsePull& sp : w.sparse) {
    SparseStep& ss = *tables_[sp.table_id].sparse_step;
    absl::MutexLock sl(&ss.mu);
    if (ss.version >= w.min_version) continue;
    lowest = std::min(lowest, ss.version);
    for (int k = 0; k < num_trainers_; ++k) {
      if (ss.version < required_from_[k].load()) continue;
      const bool done = ss.expected[k] > 0 && ss.received[k] >= ss.expected[k];
      if (!done &&
          std::find(missing.begin(), missing.end(), k) == missing.end()) {
        missing.push_back(k);
      }
    }
  }
  std::sort(missing.begin(), missing.end());
  std::string out;
  if (lowest != INT64_MAX) {
    out = absl::StrCat(
        "version ", w.min_version, " (a block is at ", lowest,
        missing.empty()
            ? "; every live trainer has pushed, the step is being applied)"
            : absl::StrCat("; waiting for the pushes of step ", lowest,
                           " from trainer(s) ", absl::StrJoin(missing, ","),
                           ")"));
  }
  {
    absl::MutexLock c(&clock_mu_);
    if (!ClockGateOk(w)) {
      std::vector<int> slow;
      const int s = job_.max_staleness();
      for (int k = 0; k < num_trainers_; ++k) {
        if (required_from_[k].load() == INT64_MAX) continue;
        if ((s >= 0 && w.step - clocks_[k] > s) || clocks_[k] < w.min_clock) {
          slow.push_back(k);
        }
      }
      absl::StrAppend(
          &out, out.empty() ? "" : "; ",
          w.min_clock > 0
              ? absl::StrCat("the end of step ", w.min_clock - 1)
              : absl::StrCat("staleness bound ", s, " at step ", w.step),
          ": waiting for trainer(s) ", absl::StrJoin(slow, ","));
    }
  }
  return out;
}

void ParameterStore::Sweep(absl::Time now) {
  if (ready() && options_.trainer_timeout > absl::ZeroDuration()) {
    bool dropped = false;
    {
      absl::MutexLock m(&members_mu_);
      for (int k = 0; k < num_trainers_; ++k) {
        Member& mem = members_[k];
        if (mem.state != MemberState::kActive) continue;
        const absl::Duration silent =
            now - absl::FromUnixMicros(last_seen_us_[k].load());
        if (silent < options_.trainer_timeout) continue;
        mem.state = MemberState::kDropped;
        PublishMemberLocked(k);
        required_from_[k].store(INT64_MAX);
        ++dropped_;
        dropped = true;
        int live = 0;
        for (int j = 0; j < num_trainers_; ++j) {
          live += required_from_[j].load() != INT64_MAX;
        }
        LOG(WARNING) << "trainer " << k << " (incarnation " << mem.incarnation
                     << ") said nothing for "
                     << absl::FormatDuration(
                            absl::Trunc(silent, absl::Seconds(1)))
                     << " (--trainer_timeout="
                     << absl::ToInt64Seconds(options_.trainer_timeout)
                     << "): dropped from the job; " << live << " of "
                     << num_trainers_ << " trainers go on";
      }
    }
    if (dropped) RecheckBarriers();
  }
  std::vector<std::shared_ptr<Waiter>> expired, to_report;
  {
    absl::MutexLock l(&waiters_mu_);
    for (const auto& w : waiters_) {
      if (w->finished.load()) continue;
      if (now - w->start >= options_.max_pull_wait) {
        expired.push_back(w);
      } else if (!w->reported && now - w->start >= options_.report_after) {
        w->reported = true;
        to_report.push_back(w);
      }
    }
  }
  for (const auto& w : to_report) {
    const std::string what = DescribeWait(*w);
    if (what.empty()) continue;
    LOG(WARNING) << "pull from trainer " << w->trainer_id << " has waited "
                 << absl::FormatDuration(now - w->start) << " for " << what;
  }
  for (const auto& w : expired) {
    const std::string what = DescribeWait(*w);
    ++pull_timeouts_;
    LOG(WARNING) << "pull from trainer " << w->trainer_id << " timed out after "
                 << absl::FormatDuration(now - w->start) << " waiting for "
                 << what;
    Finish(w, absl::DeadlineExceededError(absl::StrCat(
                  "pserver waited ", absl::FormatDuration(now - w->start),
                  " for ", what.empty() ? "the step" : what)));
  }
}

void ParameterStore::CancelAllWaiters(const absl::Status& status) {
  std::vector<std::shared_ptr<Waiter>> all;
  {
    absl::MutexLock l(&waiters_mu_);
    closed_ = true;
    all.assign(waiters_.begin(), waiters_.end());
  }
  for (const auto& w : all) Finish(w, status);
}

namespace {

constexpr uint32_t kDenseMagic = 0x44534e31;  // "DSN1"

std::string TableFileName(size_t table_id) {
  return absl::StrCat("table-", table_id, ".bin");
}

}  // namespace

absl::StatusOr<StoreSnapshot> ParameterStore::Snapshot(int64_t step) const {
  if (!ready()) {
    return absl::FailedPreconditionError(
        "checkpoint: the job is not initialised on this pserver");
  }
  StoreSnapshot snap;
  CheckpointInfo& info = snap.info;
  info.set_step(step);
  info.set_generation(generation_.load());
  *info.mutable_job() = job_;
  for (const Block* b : all_blocks_) {
    BlockRef* r = info.add_blocks();
    r->set_table_id(b->table_id);
    r->set_block(b->index);
  }
  {
    absl::MutexLock c(&clock_mu_);
    for (int64_t v : clocks_) info.add_clocks(v);
  }
  {
    absl::MutexLock m(&members_mu_);
    for (int k = 0; k < num_trainers_; ++k) {
      if (members_[k].state == MemberState::kLeft) info.add_left_trainers(k);
      if (members_[k].state == MemberState::kDropped) {
        info.add_dropped_trainers(k);
      }
    }
  }
  LockAll();
  absl::Status st;
  if (sync_) {
    for (const Block* b : all_blocks_) {
      b->mu.AssertHeld();
      if (b->version != step) {
        st = absl::FailedPreconditionError(absl::StrCat(
            "checkpoint of step ", step, ": table ",
            tables_[b->table_id].spec.name(), " block ", b->index,
            " is at version ", b->version, " (not a step boundary)"));
        break;
      }
    }
    for (size_t i = 0; st.ok() && i < tables_.size(); ++i) {
      const SparseStep* ss = tables_[i].sparse_step.get();
      if (ss == nullptr) continue;
      ss->mu.AssertHeld();
      if (ss->version != step) {
        st = absl::FailedPreconditionError(
            absl::StrCat("checkpoint of step ", step, ": sparse table ",
                         tables_[i].spec.name(), " is at version ", ss->version,
                         " (not a step boundary)"));
      }
    }
  }
  for (size_t i = 0; st.ok() && i < tables_.size(); ++i) {
    const Table& t = tables_[i];
    std::string blob;
    if (t.sparse != nullptr) {
      t.sparse->Serialize(&blob);
    } else {
      AppendPod(&blob, kDenseMagic);
      uint32_t n = 0;
      for (const Block* b : all_blocks_) n += b->table_id == i;
      AppendPod(&blob, n);
      for (const Block* b : all_blocks_) {
        if (b->table_id != i) continue;
        b->mu.AssertHeld();
        AppendPod<uint32_t>(&blob, b->index);
        AppendPod<int64_t>(&blob, b->version);
        AppendPod<int64_t>(&blob, b->size);
        AppendPod<uint32_t>(&blob, static_cast<uint32_t>(b->slots.size()));
        AppendFloats(&blob, b->value.data(), b->value.size());
        for (const auto& slot : b->slots) {
          AppendFloats(&blob, slot.data(), slot.size());
        }
      }
    }
    snap.files.emplace_back(TableFileName(i), std::move(blob));
  }
  UnlockAll();
  if (!st.ok()) return st;
  return snap;
}

absl::Status ParameterStore::Restore(const StoreSnapshot& snap,
                                     uint64_t generation) {
  const CheckpointInfo& info = snap.info;
  std::vector<BlockId> ids;
  for (const BlockRef& r : info.blocks()) {
    ids.push_back(BlockId{r.table_id(), r.block()});
  }
  const bool running = ready();
  if (!running) {
    auto st = InitJob(info.job(), ids);
    if (!st.ok()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", st.status().message()));
    }
  } else if (!google::protobuf::util::MessageDifferencer::Equals(info.job(),
                                                                 job_) ||
             ids.size() != all_blocks_.size()) {
    return absl::FailedPreconditionError(
        "rollback: the checkpoint holds another job or other blocks than "
        "this pserver");
  }
  // Parse every dense blob before changing anything.
  struct Parsed {
    Block* block;
    int64_t version;
    std::vector<float> value;
    std::vector<std::vector<float>> slots;
  };
  std::vector<Parsed> parsed;
  absl::flat_hash_set<const Block*> seen_blocks;
  std::vector<const std::string*> sparse_blobs(tables_.size(), nullptr);
  for (const auto& [name, blob] : snap.files) {
    size_t id = tables_.size();
    for (size_t i = 0; i < tables_.size(); ++i) {
      if (name == TableFileName(i)) id = i;
    }
    if (id == tables_.size()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: unexpected file ", name));
    }
    const Table& t = tables_[id];
    if (t.sparse != nullptr) {
      sparse_blobs[id] = &blob;
      continue;
    }
    BlobReader r(blob);
    uint32_t magic = 0, n = 0;
    if (!r.Get(&magic) || magic != kDenseMagic || !r.Get(&n)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", name, ": bad header"));
    }
    for (uint32_t j = 0; j < n; ++j) {
      Parsed p;
      uint32_t index = 0, nslots = 0;
      int64_t size = 0;
      if (!r.Get(&index) || !r.Get(&p.version) || !r.Get(&size) ||
          !r.Get(&nslots) || !r.GetFloats(&p.value, size)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint: ", name, ": truncated block"));
      }
      auto b = FindBlock(static_cast<uint32_t>(id), index);
      if (!b.ok() || (*b)->size != size ||
          nslots != static_cast<uint32_t>(t.optimizer->num_slots())) {
        return absl::DataLossError(
            absl::StrCat("checkpoint: ", name, ": block ", index,
                         " does not match the job (size or optimizer state)"));
      }
      if (!seen_blocks.insert(*b).second) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint: ", name, ": block ", index, " appears twice"));
      }
      p.block = *b;
      p.slots.resize(nslots);
      for (auto& slot : p.slots) {
        if (!r.GetFloats(&slot, size)) {
          return absl::DataLossError(
              absl::StrCat("checkpoint: ", name, ": truncated block"));
        }
      }
      parsed.push_back(std::move(p));
    }
    if (!r.done()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", name, ": trailing bytes"));
    }
  }
  if (parsed.size() != all_blocks_.size()) {
    return absl::DataLossError(absl::StrCat("checkpoint: holds ", parsed.size(),
                                            " dense blocks, the job places ",
                                            all_blocks_.size(), " here"));
  }
  // Check every sparse blob before changing anything too, by loading it into
  // a scratch table (Deserialize empties the table it fails on).
  for (size_t i = 0; i < tables_.size(); ++i) {
    const Table& t = tables_[i];
    if (t.sparse == nullptr) continue;
    if (sparse_blobs[i] == nullptr) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: no file for table ", t.spec.name()));
    }
    SparseTable scratch(t.spec.sparse(), t.optimizer.get(), /*num_stripes=*/1);
    absl::Status s = scratch.Deserialize(*sparse_blobs[i]);
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", TableFileName(i), ": ", s.message()));
    }
  }
  std::vector<std::shared_ptr<Waiter>> aborted;
  absl::Status st;
  // members_mu_ before the block locks, as in Register.
  members_mu_.Lock();
  LockAll();
  for (Parsed& p : parsed) {
    Block* b = p.block;
    b->mu.AssertHeld();
    b->value = std::move(p.value);
    b->slots = std::move(p.slots);
    b->version = p.version;
    b->has_value = true;
    b->num_pushed = 0;
    b->accum.clear();
    if (!b->pushed.empty()) std::fill(b->pushed.begin(), b->pushed.end(), 0);
    for (auto& [v, w] : b->waiters) aborted.push_back(std::move(w));
    b->waiters.clear();
  }
  for (size_t i = 0; i < tables_.size(); ++i) {
    Table& t = tables_[i];
    if (t.sparse == nullptr) continue;
    SparseStep& ss = *t.sparse_step;
    ss.mu.AssertHeld();
    absl::Status s2 =
        sparse_blobs[i] == nullptr
            ? absl::DataLossError(
                  absl::StrCat("checkpoint: no file for table ", t.spec.name()))
            : t.sparse->Deserialize(*sparse_blobs[i]);
    if (!s2.ok() && st.ok()) st = s2;
    ss.version = info.step();
    ss.trainers_done = 0;
    std::fill(ss.expected.begin(), ss.expected.end(), 0);
    std::fill(ss.received.begin(), ss.received.end(), 0);
    std::fill(ss.done.begin(), ss.done.end(), 0);
    for (auto& [v, w] : ss.waiters) aborted.push_back(std::move(w));
    ss.waiters.clear();
  }
  generation_.store(generation);
  base_step_.store(info.step());
  if (!running) {
    // A restarted pserver: the trainers that had left or been dropped stay
    // out; every other one is taken as alive now, so that one that died
    // while this pserver was away is dropped after --trainer_timeout
    // instead of being waited for forever. Its incarnation is learnt from
    // its first heartbeat or registration.
    const int64_t now = absl::ToUnixMicros(absl::Now());
    for (int k = 0; k < num_trainers_; ++k) {
      last_seen_us_[k].store(now);
      members_[k] = Member{MemberState::kActive, 0};
    }
    for (int k : info.left_trainers()) {
      if (k >= 0 && k < num_trainers_) {
        members_[k].state = MemberState::kLeft;
      }
    }
    for (int k : info.dropped_trainers()) {
      if (k >= 0 && k < num_trainers_) {
        members_[k].state = MemberState::kDropped;
      }
    }
    for (int k = 0; k < num_trainers_; ++k) PublishMemberLocked(k);
  }
  for (int k = 0; k < num_trainers_; ++k) {
    // Every trainer still in the job redoes the steps from here.
    const bool in = members_[k].state == MemberState::kExpected ||
                    members_[k].state == MemberState::kActive;
    required_from_[k].store(in ? info.step() : INT64_MAX);
  }
  UnlockAll();
  members_mu_.Unlock();
  {
    absl::MutexLock c(&clock_mu_);
    if (info.clocks_size() == num_trainers_) {
      clocks_.assign(info.clocks().begin(), info.clocks().end());
    }
    for (auto& w : stale_waiters_) aborted.push_back(std::move(w));
    stale_waiters_.clear();
  }
  if (!running) {
    ready_.store(true, std::memory_order_release);
  } else {
    ++rollbacks_;
  }
  const absl::Status abort = absl::AbortedError(
      absl::StrCat("the job was rolled back to step ", info.step(),
                   " (generation ", generation, "); the trainer must recover"));
  for (auto& w : aborted) Finish(w, abort);
  LOG(WARNING) << (running ? "rolled back" : "restored") << " to step "
               << info.step() << " (generation " << generation
               << "): " << parsed.size() << " dense blocks"
               << (st.ok() ? "" : absl::StrCat("; ", st.message()));
  return st;
}

ParameterStore::VersionRange ParameterStore::Versions() const {
  VersionRange r{INT64_MAX, 0};
  if (!ready()) return VersionRange{};
  for (const Table& t : tables_) {
    for (const auto& [index, b] : t.blocks) {
      absl::MutexLock bl(&b->mu);
      r.min = std::min(r.min, b->version);
      r.max = std::max(r.max, b->version);
    }
  }
  for (const Table& t : tables_) {
    if (t.sparse_step == nullptr) continue;
    absl::MutexLock sl(&t.sparse_step->mu);
    r.min = std::min(r.min, t.sparse_step->version);
    r.max = std::max(r.max, t.sparse_step->version);
  }
  if (r.min == INT64_MAX) r.min = 0;
  return r;
}

StoreCounters ParameterStore::counters() const {
  StoreCounters c;
  c.pushes = pushes_.load();
  c.block_updates = block_updates_.load();
  c.duplicate_block_pushes = duplicate_block_pushes_.load();
  c.rejected_requests = rejected_.load();
  c.pulls = pulls_.load();
  c.pull_timeouts = pull_timeouts_.load();
  c.dropped_trainers = dropped_.load();
  c.rejoined_trainers = rejoined_.load();
  c.late_block_pushes = late_.load();
  c.rollbacks = rollbacks_.load();
  return c;
}

std::vector<ParameterStore::SparseTableStats> ParameterStore::SparseStats()
    const {
  std::vector<SparseTableStats> out;
  if (!ready()) return out;
  for (const Table& t : tables_) {
    if (t.sparse == nullptr) continue;
    out.push_back(SparseTableStats{t.spec.name(), t.sparse->counters(),
                                   t.sparse->MemoryBytes()});
  }
  return out;
}

size_t ParameterStore::num_blocks() const {
  absl::MutexLock l(&init_mu_);
  return init_blocks_.size();
}

std::vector<float> ParameterStore::TEST_BlockValues(uint32_t table_id,
                                                    uint32_t block) const {
  auto b = FindBlock(table_id, block);
  if (!b.ok()) return {};
  absl::MutexLock bl(&(*b)->mu);
  return (*b)->value;
}

int64_t ParameterStore::TEST_BlockVersion(uint32_t table_id,
                                          uint32_t block) const {
  auto b = FindBlock(table_id, block);
  if (!b.ok()) return -1;
  absl::MutexLock bl(&(*b)->mu);
  return (*b)->version;
}

}  // namespace shardps
