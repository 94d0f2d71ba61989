#include "pserver/service/request_handler.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "common/transport/wire_limits.h"
#include "compression/value_encoding.h"
#include "glog/logging.h"
#include "pserver/checkpoint/recovery.h"
#include "pserver/checkpoint/row_export.h"
#include "pserver/checkpoint/store_snapshots.h"

namespace shardps {
namespace {

// Views little-endian uint64 keys in `bytes` (protobuf keeps `bytes` in
// buffers aligned for them).
absl::StatusOr<absl::Span<const uint64_t>> ViewKeys(const std::string& bytes) {
  if (bytes.size() % sizeof(uint64_t) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys have ", bytes.size(),
                     " bytes, not a whole number of uint64 keys"));
  }
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(uint64_t) != 0) {
    return absl::InternalError("misaligned keys buffer");
  }
  return absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(bytes.data()),
                             bytes.size() / sizeof(uint64_t));
}

// An allocation that failed while a request was handled: refused, with
// nothing applied.
absl::Status OutOfMemoryError(absl::string_view what) {
  LOG(WARNING) << what << ": out of memory; refused";
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": the pserver is out of memory (see --max_memory_mb)"));
}

// The ids of the blocks `refs` name (BlockRef or DenseBlock).
template <typename Refs>
std::vector<BlockId> ToBlockIds(const Refs& refs) {
  std::vector<BlockId> ids;
  ids.reserve(refs.size());
  for (const auto& r : refs) ids.push_back(BlockId{r.table_id(), r.block()});
  return ids;
}

// The dense blocks a pull or push names, resolved once
// (StoreState::ResolveBlocks): each block once, and at most
// kMaxChunkBytes of float32 values in all (the trainer's chunk plan,
// trainer/client/placement.cc), or a single block. The count and the
// repeats are checked before anything is looked up or allocated for the
// answer: a request of a few bytes naming a large block many times would
// otherwise cost its size each time.
template <typename Refs>
absl::StatusOr<std::vector<DenseTableBlock*>> ResolveDense(
    const Refs& refs, ParameterStore* store) {
  if (static_cast<size_t>(refs.size()) > kMaxChunkBytes / sizeof(float)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a request names ", refs.size(), " dense blocks; at most ",
                     kMaxChunkBytes / sizeof(float), " fit in one"));
  }
  if (refs.size() > 1) {
    absl::flat_hash_set<std::pair<uint32_t, uint32_t>> seen;
    seen.reserve(refs.size());
    for (const auto& r : refs) {
      if (!seen.insert({r.table_id(), r.block()}).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("table id ", r.table_id(), " block ", r.block(),
                         " is named twice in one request"));
      }
    }
  }
  ASSIGN_OR_RETURN(std::vector<DenseTableBlock*> units,
                   store->state()->ResolveBlocks(ToBlockIds(refs)));
  size_t bytes = 0;
  for (const DenseTableBlock* b : units) {
    bytes += static_cast<size_t>(b->size()) * sizeof(float);
  }
  if (units.size() > 1 && bytes > kMaxChunkBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a request names ", refs.size(), " dense blocks of ",
                     bytes, " bytes; one request carries at most ",
                     kMaxChunkBytes, " (or a single block)"));
  }
  return units;
}

// The dense blocks of a request as the store takes them, with the units
// they were resolved to (none: the store finds them, and a THRESHOLD block
// is refused), decoded into `scratch` where they are not float32 (one
// vector per block).
absl::Status ToBlockData(
    const google::protobuf::RepeatedPtrField<DenseBlock>& blocks,
    absl::Span<DenseTableBlock* const> units, std::vector<BlockData>* out,
    std::vector<std::vector<float>>* scratch) {
  out->reserve(blocks.size());
  scratch->resize(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    const DenseBlock& b = blocks[i];
    DenseTableBlock* unit = units.empty() ? nullptr : units[i];
    // A threshold message does not say how long its block is.
    const int64_t size =
        b.encoding() == THRESHOLD && unit != nullptr ? unit->size() : 0;
    absl::StatusOr<absl::Span<const float>> values =
        b.encoding() == THRESHOLD && unit == nullptr
            ? absl::InvalidArgumentError(
                  "initial values come whole, not threshold-encoded")
            : DecodeBlockValues(b.encoding(), b.values(), size, &(*scratch)[i]);
    if (!values.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table id ", b.table_id(), " block ", b.block(), ": ",
                       values.status().message()));
    }
    out->push_back(BlockData{b.table_id(), b.block(), *values, unit});
  }
  return absl::OkStatus();
}

// A request that names a shared region its binding did not resolve into a
// lane (a handler called without its bindings).
template <typename Request>
absl::Status NoLaneFor(const Request& req) {
  return absl::FailedPreconditionError(absl::StrCat(
      "trainer ", req.trainer_id(), " names shared region ",
      req.shared_region(), ", which reached the handler without its values"));
}

// The float32 values of a push's blocks in `lane`, as the store takes them,
// copied into `copy` before anything checks or applies them: the trainer
// can write them at any time (but in a lane whose values are Stable, read
// in place). INVALID_ARGUMENT for an offset outside the
// lane or values also in the message, NOT_FOUND for an unknown block.
absl::Status CopyFromLane(const PushRequest& req,
                          absl::Span<DenseTableBlock* const> units,
                          const DenseValueLane* lane,
                          std::vector<BlockData>* out,
                          std::unique_ptr<float[]>* copy) {
  if (lane == nullptr) return NoLaneFor(req);
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (int i = 0; i < req.blocks_size(); ++i) {
    const DenseBlock& b = req.blocks(i);
    const int64_t size = units[i]->size();
    if (b.encoding() != FLOAT32 || !b.values().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table id ", b.table_id(), " block ", b.block(),
          ": values in a shared region are FLOAT32 and not in the message"));
    }
    RETURN_IF_ERROR(
        lane->Check(b.shared_offset(), size, "a shared push block"));
    sizes.push_back(size);
    total += size;
  }
  // A lane of the pserver's own memory is read in place.
  bool stable = true;
  for (int i = 0; i < req.blocks_size() && stable; ++i) {
    stable = lane->Stable(req.blocks(i).shared_offset(), sizes[i]) != nullptr;
  }
  if (stable) {
    for (int i = 0; i < req.blocks_size(); ++i) {
      const DenseBlock& b = req.blocks(i);
      out->push_back(BlockData{
          b.table_id(), b.block(),
          absl::Span<const float>(lane->Stable(b.shared_offset(), sizes[i]),
                                  static_cast<size_t>(sizes[i])),
          units[i]});
    }
    return absl::OkStatus();
  }
  // Not zero-filled: every float is written below.
  copy->reset(new float[static_cast<size_t>(total)]);
  float* at = copy->get();
  for (int i = 0; i < req.blocks_size(); ++i) {
    const DenseBlock& b = req.blocks(i);
    const absl::Span<float> to(at, static_cast<size_t>(sizes[i]));
    lane->Read(b.shared_offset(), to);
    out->push_back(BlockData{b.table_id(), b.block(), to, units[i]});
    at += sizes[i];
  }
  return absl::OkStatus();
}

// The shards of the sparse tables a pull reads, resolved once, into
// *shards; at most kMaxChunkBytes of keys and rows in all (or one key).
absl::Status ResolveSparseRows(ParameterStore* store, const PullRequest& req,
                               absl::InlinedVector<SparseShard*, 4>* shards) {
  // Sparse rows are written straight into the reply's buffers: at most
  // kMaxChunkBytes of keys and rows in all (or one key), as the trainer
  // splits them.
  size_t sparse_bytes = 0, sparse_keys = 0;
  for (const SparseRows& r : req.sparse()) {
    ASSIGN_OR_RETURN(SparseShard * shard,
                     store->state()->ResolveSparse(r.table_id(), r.shard()));
    shards->push_back(shard);
    const size_t n = r.keys().size() / sizeof(uint64_t);
    sparse_keys += n;
    sparse_bytes +=
        n * (sizeof(uint64_t) + sizeof(float) * shard->rows().dim());
  }
  if (sparse_keys > 1 && sparse_bytes > kMaxChunkBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a pull asks for ", sparse_keys, " sparse rows, ", sparse_bytes,
        " bytes with their keys; one pull carries at most ", kMaxChunkBytes,
        " (or one row)"));
  }
  return absl::OkStatus();
}

using BlockOffsets =
    absl::flat_hash_map<std::pair<uint32_t, uint32_t>, uint64_t>;

// With a lane: each block's offset in it, checked (FLOAT32, in the
// lane); nothing without one (FAILED_PRECONDITION for a request that
// names a region yet came without its lane).
absl::Status LanePullTargets(const PullRequest& req,
                             absl::Span<DenseTableBlock* const> units,
                             const DenseValueLane* lane,
                             BlockOffsets* offsets) {
  if (req.shared_region() == 0 && lane == nullptr) return absl::OkStatus();
  if (lane == nullptr) return NoLaneFor(req);
  if (req.encoding() != FLOAT32) {
    return absl::InvalidArgumentError(
        "a pull into a shared region asks for FLOAT32 values");
  }
  for (int i = 0; i < req.blocks_size(); ++i) {
    const BlockRef& b = req.blocks(i);
    RETURN_IF_ERROR(lane->Check(b.shared_offset(), units[i]->size(),
                                "a shared pull block"));
    (*offsets)[{b.table_id(), b.block()}] = b.shared_offset();
  }
  return absl::OkStatus();
}

// A pull's encoding and the trainer's incarnation.
absl::Status CheckPull(const ParameterStore& store, const PullRequest& req) {
  const ValueEncoding encoding = req.encoding();
  if (encoding != FLOAT32 && encoding != FLOAT16 && encoding != BFLOAT16 &&
      encoding != THRESHOLD) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull encoding ", ValueEncoding_Name(encoding),
        ": pulls come as FLOAT32, FLOAT16, BFLOAT16 or THRESHOLD"));
  }
  return store.CheckIncarnation(req.trainer_id(), req.incarnation());
}

// Where a pull's rows of each sparse table go: the reply's buffers, made
// here, one per table of `shards` (ResolveSparseRows).
absl::StatusOr<std::vector<SparsePull>> SparseRowTargets(
    const PullRequest& req, absl::Span<SparseShard* const> shards,
    PullResponse* resp) {
  std::vector<SparsePull> sparse;
  for (int i = 0; i < req.sparse_size(); ++i) {
    const SparseRows& r = req.sparse(i);
    ASSIGN_OR_RETURN(const absl::Span<const uint64_t> keys, ViewKeys(r.keys()));
    const int dim = shards[i]->rows().dim();
    SparseRows* out = resp->add_sparse();
    out->set_table_id(r.table_id());
    out->mutable_values()->resize(keys.size() * dim * sizeof(float));
    sparse.push_back(
        SparsePull{r.table_id(), keys,
                   reinterpret_cast<float*>(out->mutable_values()->data()),
                   r.shard(), shards[i]});
  }
  return sparse;
}

}  // namespace

RequestHandler::RequestHandler(ParameterStore* store,
                               Checkpointer* checkpointer, const Clock* clock)
    : store_(store),
      checkpointer_(checkpointer),
      clock_(clock),
      shared_regions_(store),
      replication_(store, &dedup_),
      restorer_(store, checkpointer),
      // Shadows of compressed pulls count in --max_memory_mb.
      pull_deltas_(PullDeltaEncoder::Accounting{
          [b = store->budget()](int64_t n) { return b->TryReserve(n); },
          [b = store->budget()](int64_t n) { b->Release(n); }}) {}

absl::Status RequestHandler::InitJob(const InitJobRequest& req,
                                     InitJobResponse* resp) {
  if (req.trainer_id() != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("InitJob from trainer ", req.trainer_id(),
                     ": only the chief (trainer 0) initialises the job"));
  }
  if (req.num_servers() != 0 &&
      (req.num_servers() < 0 || req.num_servers() > kMaxPservers ||
       req.server_index() < 0 || req.server_index() >= req.num_servers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: pserver ", req.server_index(), " of ", req.num_servers(),
        " (at most ", kMaxPservers, " pservers)"));
  }
  RETURN_IF_ERROR(restorer_.BeforeInitJob(req));
  auto ready =
      store_->InitJob(req.job(), ToBlockIds(req.blocks()), SparseShardsOf(req));
  if (ready.ok() && req.num_servers() > 0) {
    ShardPlacement placement;
    placement.set_server_index(req.server_index());
    placement.set_num_servers(req.num_servers());
    placement.set_scheme(kPlacementScheme);
    RETURN_IF_ERROR(store_->state()->AdoptPlacement(placement));
  }
  if (ready.ok() && !*ready && req.rejoin()) {
    RETURN_IF_ERROR(replication_.FillForRejoin(req));
  }
  if (ready.ok() && req.job().replication() > 1) {
    RETURN_IF_ERROR(replication_.Start(req));
  }
  if (ready.ok()) resp->set_already_ready(*ready);
  return ready.status();
}

absl::Status RequestHandler::SetInitialValues(
    const SetInitialValuesRequest& req, SetInitialValuesResponse* resp) {
  if (req.trainer_id() != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("SetInitialValues from trainer ", req.trainer_id(),
                     ": only the chief (trainer 0) sets the initial values"));
  }
  // Before the job is ready its blocks are the store's to find.
  std::vector<BlockData> blocks;
  std::vector<std::vector<float>> scratch;
  absl::Status s = ToBlockData(req.blocks(), {}, &blocks, &scratch);
  if (s.ok()) s = store_->SetInitialValues(blocks);
  return s;
}

absl::Status RequestHandler::CommitInit(const CommitInitRequest& req,
                                        CommitInitResponse* resp) {
  if (req.trainer_id() != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("CommitInit from trainer ", req.trainer_id(),
                     ": only the chief (trainer 0) commits the job"));
  }
  return store_->CommitInit();
}

absl::Status RequestHandler::Register(const RegisterRequest& req,
                                      RegisterResponse* resp,
                                      absl::string_view peer) {
  if (req.trainer_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative trainer_id ", req.trainer_id()));
  }
  if (store_->ready() && req.trainer_id() >= store_->job().num_trainers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer_id ", req.trainer_id(), " is out of range: the job has ",
        store_->job().num_trainers(), " trainers"));
  }
  if (req.incarnation() == 0) {
    // 0 stands for "none sent": registered, it would turn the incarnation
    // checks of that trainer's requests off.
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer ", req.trainer_id(),
        " registers without an incarnation; every process sends its own "
        "(non-zero)"));
  }
  if (req.confirm()) {
    absl::Status s = store_->ConfirmJoin(req.trainer_id(), req.incarnation(),
                                         req.start_step());
    resp->set_job_ready(store_->ready());
    resp->set_join_step(req.start_step());
    resp->set_generation(store_->generation());
    return s;
  }
  auto r = store_->Register(req.trainer_id(), req.incarnation(), clock_->Now());
  if (!r.ok()) return r.status();
  LOG(INFO) << "trainer " << req.trainer_id() << " registered (incarnation "
            << req.incarnation() << ", from " << peer << ")";
  resp->set_job_ready(r->job_ready);
  resp->set_join_step(r->join_step);
  resp->set_generation(r->generation);
  return absl::OkStatus();
}

absl::Status RequestHandler::Heartbeat(const HeartbeatRequest& req,
                                       HeartbeatResponse* resp) {
  return store_->Heartbeat(req.trainer_id(), req.incarnation(), clock_->Now());
}

absl::Status RequestHandler::Leave(const LeaveRequest& req,
                                   LeaveResponse* resp) {
  RETURN_IF_ERROR(store_->Leave(req.trainer_id(), req.incarnation()));
  if (!req.finished() || !store_->ready()) return absl::OkStatus();
  return store_->state()->membership->MarkFinished(req.trainer_id(),
                                                   req.incarnation());
}

absl::Status RequestHandler::Checkpoint(const CheckpointRequest& req,
                                        CheckpointResponse* resp) {
  if (checkpointer_ == nullptr) {
    return absl::FailedPreconditionError(
        "checkpoint requested, but this pserver was started without "
        "--checkpoint_dir");
  }
  if (req.trainer_id() != 0) {
    return absl::PermissionDeniedError(
        "only the chief (trainer 0) asks for checkpoints");
  }
  if (req.step() < 0 || req.step() > kMaxCheckpointStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step ", req.step(), " out of range"));
  }
  absl::MutexLock l(&rollback_mu_);
  if (absl::Status s = store_->CheckGeneration("checkpoint", req.generation());
      !s.ok()) {
    return s;
  }
  if (store_->ready() && store_->job().replicas_to_aggregate() > 0) {
    // K of N: a save still waiting for a unit to get to its step (a lagging
    // unit) gives way to this one, rather than hold it up.
    StoreSnapshots(store_).CallOffSaves(
        absl::StrCat("the chief asks for step ", req.step()));
  }
  // A full disk: refused before the store is copied (the chief logs it and
  // counts it, and asks again at its next interval).
  RETURN_IF_ERROR(checkpointer_->CheckRoom());
  absl::Status previous;
  RETURN_IF_ERROR(
      StoreSnapshots(store_).SaveTo(checkpointer_, req.step(), &previous));
  if (!previous.ok()) resp->set_previous_write_error(previous.ToString());
  return absl::OkStatus();
}

constexpr uint64_t kMaxGenerationStep = 1 << 16;

absl::Status RequestHandler::CheckRollbackCaller(
    const RollbackRequest& req) const {
  if (checkpointer_ == nullptr) {
    return absl::FailedPreconditionError(
        "rollback requested, but this pserver was started without "
        "--checkpoint_dir");
  }
  if (!store_->ready()) return absl::OkStatus();
  if (req.trainer_id() < 0 ||
      req.trainer_id() >= store_->job().num_trainers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rollback asked by trainer ", req.trainer_id(), ": the job has ",
        store_->job().num_trainers(), " trainers"));
  }
  return store_->CheckIncarnation(req.trainer_id(), req.incarnation());
}

void RequestHandler::AskChiefToRollBack(const RollbackRequest& req) {
  // The chief may be waiting in a pull here for this trainer's push: an
  // ABORTED pull sends it to look at the pservers itself.
  if (store_->ready()) {
    store_->state()->waiters.Interrupt(absl::AbortedError(absl::StrCat(
        "trainer ", req.trainer_id(),
        " found the pservers disagreeing and asks the chief to roll the "
        "job back to step ",
        req.step())));
  }
  LOG_EVERY_T(WARNING, 10)
      << "trainer " << req.trainer_id() << " asks the chief to roll back to "
      << "step " << req.step() << " (generation " << req.generation()
      << "): the job's waiting pulls were answered ABORTED";
}

absl::Status RequestHandler::CheckRollbackGeneration(
    const RollbackRequest& req) const {
  if (store_->ready() && req.generation() <= store_->generation()) {
    // Generations only grow; this trainer saw an older state.
    return absl::AbortedError(
        absl::StrCat("rollback to generation ", req.generation(),
                     ": this pserver is on generation ", store_->generation(),
                     " already; look again"));
  }
  if (req.generation() > store_->generation() + kMaxGenerationStep) {
    // Trainers choose one above the highest they saw: never far above
    // this pserver's. A generation near 2^64 would leave no room for the
    // recoveries after it.
    return absl::InvalidArgumentError(absl::StrCat(
        "rollback to generation ", req.generation(), ": this pserver is on ",
        "generation ", store_->generation(),
        ", and a rollback moves it by at most ", kMaxGenerationStep,
        "; refused"));
  }
  return absl::OkStatus();
}

absl::Status RequestHandler::Rollback(const RollbackRequest& req,
                                      RollbackResponse* resp) {
  RETURN_IF_ERROR(CheckRollbackCaller(req));
  if (req.trainer_id() != 0) {
    // Only the chief rolls back; another trainer that finds the pservers
    // disagreeing wakes it.
    AskChiefToRollBack(req);
    return absl::OkStatus();
  }
  absl::MutexLock l(&rollback_mu_);
  if (store_->ready() && store_->generation() == req.generation() &&
      store_->base_step() == req.step()) {
    return absl::OkStatus();  // done already, by another trainer
  }
  RETURN_IF_ERROR(CheckRollbackGeneration(req));
  RecoveryTarget target;
  target.kind = RecoveryTarget::Kind::kRollback;
  target.step = req.step();
  target.generation = req.generation();
  const absl::Status s =
      RecoverFromCheckpoint(checkpointer_, store_, target).status();
  LOG(WARNING) << "rollback to step " << req.step() << " (generation "
               << req.generation() << ") asked by trainer " << req.trainer_id()
               << ": " << (s.ok() ? "done" : s.ToString());
  return s;
}

absl::Status RequestHandler::GetStatus(const GetStatusRequest& req,
                                       GetStatusResponse* resp) {
  resp->set_job_ready(store_->ready());
  if (store_->ready()) {
    *resp->mutable_job() = store_->job();
    const auto v = store_->Versions();
    resp->set_min_version(v.min);
    resp->set_max_version(v.max);
    for (int k : store_->LiveTrainers()) resp->add_live_trainers(k);
    for (int k : store_->state()->membership->FinishedTrainers()) {
      resp->add_finished_trainers(k);
    }
    for (const SparseTableStats& t : store_->SparseStats()) {
      SparseTableStatus* st = resp->add_sparse_tables();
      st->set_name(t.name);
      st->set_shard(t.shard);
      st->set_rows(t.counters.rows);
      st->set_max_rows(t.counters.max_rows);
      st->set_pending_keys(t.counters.pending_keys);
      st->set_created(t.counters.created);
      st->set_evicted_full(t.counters.evicted_full);
      st->set_evicted_expired(t.counters.expired);
      st->set_refused_rows(t.counters.refused_rows);
      st->set_dropped_updates(t.counters.dropped_updates);
      st->set_memory_bytes(static_cast<int64_t>(t.memory_bytes));
      st->set_storage_type(t.storage);
      st->set_on_disk(t.counters.on_disk);
      st->set_disk_rows(t.counters.disk_rows);
      st->set_spilled_rows(t.counters.spilled_rows);
      st->set_loaded_rows(t.counters.loaded_rows);
      st->set_disk_errors(t.counters.disk_errors);
    }
  }
  resp->set_generation(store_->generation());
  resp->set_base_step(store_->base_step());
  resp->set_checkpoints_enabled(checkpointer_ != nullptr);
  replication_.AddStatus(resp);
  if (checkpointer_ != nullptr) {
    auto steps = checkpointer_->Steps();
    if (!steps.ok()) return steps.status();
    for (int64_t s : *steps) resp->add_checkpoint_steps(s);
  }
  return absl::OkStatus();
}

void RequestHandler::Pull(const PullRequest& req, PullResponse* resp,
                          std::function<void(absl::Status)> done,
                          std::shared_ptr<const DenseValueLane> lane) {
  try {
    StartPull(req, resp, done, std::move(lane));
  } catch (const std::bad_alloc&) {
    // Thrown while the pull was set up, before the store held it.
    resp->Clear();
    done(OutOfMemoryError("pull"));
  }
}

void RequestHandler::StartPull(const PullRequest& req, PullResponse* resp,
                               std::function<void(absl::Status)>& done,
                               std::shared_ptr<const DenseValueLane> lane) {
  if (req.lars_norms()) {
    PullNorms(req, resp, done);
    return;
  }
  if (absl::Status s = CheckPull(*store_, req); !s.ok()) {
    done(s);
    return;
  }
  absl::StatusOr<std::vector<DenseTableBlock*>> units =
      ResolveDense(req.blocks(), store_);
  if (!units.ok()) {
    done(units.status());
    return;
  }
  absl::InlinedVector<SparseShard*, 4> shards;
  if (absl::Status s = ResolveSparseRows(store_, req, &shards); !s.ok()) {
    done(s);
    return;
  }
  // Through a lane: where each block's values go in it.
  LaneOffsets offsets;
  if (absl::Status s = LanePullTargets(req, *units, lane.get(), &offsets);
      !s.ok()) {
    done(s);
    return;
  }
  resp->mutable_blocks()->Reserve(req.blocks_size());
  absl::StatusOr<std::vector<SparsePull>> sparse =
      SparseRowTargets(req, shards, resp);
  if (!sparse.ok()) {
    resp->Clear();
    done(sparse.status());
    return;
  }
  // A compressed block that could not be encoded fails the pull.
  auto failed = std::make_shared<absl::Status>();
  store_->Pull(
      req.trainer_id(), req.min_version(), req.step(), req.min_clock(), *units,
      *sparse,
      DenseSink(req, resp, std::move(lane), std::move(offsets), failed),
      [resp, done, failed](absl::Status s, absl::Duration waited) {
        if (s.ok()) s = *failed;
        if (!s.ok()) resp->Clear();
        resp->set_wait_micros(absl::ToInt64Microseconds(waited));
        done(std::move(s));
      },
      req.generation(), req.own_clock());
}

PullSink RequestHandler::DenseSink(const PullRequest& req, PullResponse* resp,
                                   std::shared_ptr<const DenseValueLane> lane,
                                   LaneOffsets offsets,
                                   std::shared_ptr<absl::Status> failed) {
  const ValueEncoding encoding = req.encoding();
  HeldBlocks held;
  if (encoding == THRESHOLD) {
    for (const BlockRef& b : req.blocks()) {
      held[{b.table_id(), b.block()}] = {b.held_epoch(), b.held_version()};
    }
  }
  return [this, resp, encoding, lane = std::move(lane),
          offsets = std::move(offsets), held = std::move(held),
          generation = store_->generation(), failed = std::move(failed)](
             uint32_t table_id, uint32_t block, int64_t version,
             absl::Span<const float> values) {
    DenseBlock* b = resp->add_blocks();
    b->set_table_id(table_id);
    b->set_block(block);
    b->set_version(version);
    b->set_encoding(encoding);
    if (lane != nullptr) {
      const uint64_t at = offsets.at({table_id, block});
      b->set_shared_offset(at);
      lane->Write(at, values);
    } else if (encoding == THRESHOLD) {
      const PullDeltaDecoder::Held h = held.at({table_id, block});
      PullDeltaEncoder::Reply r;
      absl::Status s =
          pull_deltas_.Serve(table_id, block, generation, version, values,
                             h.epoch, h.version, b->mutable_values(), &r);
      if (!s.ok() && failed->ok()) *failed = s;
      b->set_encoding(r.dense ? FLOAT32 : THRESHOLD);
      b->set_version(r.version);
      b->set_delta_epoch(r.epoch);
      b->set_base_version(r.base_version);
    } else {
      EncodeValues(values, encoding, b->mutable_values());
    }
  };
}

absl::Status RequestHandler::Push(const PushRequest& req, PushResponse* resp,
                                  const DenseValueLane* lane) {
  if (req.request_id() == 0) {
    return absl::InvalidArgumentError(
        "push without request_id: every push carries a non-zero id so that a "
        "retry is applied once");
  }
  absl::Status first;
  switch (dedup_.Begin(req.request_id(), &first)) {
    case RequestDedup::Outcome::kDone:
      return first;
    case RequestDedup::Outcome::kInFlight:
      return absl::UnavailableError(absl::StrCat(
          "push ", req.request_id(), " is still being applied; retry"));
    case RequestDedup::Outcome::kNew:
      break;
  }
  absl::Status s;
  try {
    s = store_->CheckIncarnation(req.trainer_id(), req.incarnation());
    if (!s.ok()) {
      // a replaced process: nothing is applied
    } else if ((req.blocks_size() > 0) + (req.sparse_size() > 0) +
                   (req.table_norms_size() > 0) >
               1) {
      s = absl::InvalidArgumentError(
          "a push carries dense blocks, sparse rows or table norms, one "
          "kind only");
    } else if (req.table_norms_size() > 0) {
      s = PushTableNorms(req);
    } else if (req.sparse_size() > 0) {
      s = PushSparse(req);
    } else {
      s = PushDense(req, resp, lane);
    }
  } catch (const std::bad_alloc&) {
    // Decoding happens before anything is applied, and applying allocates
    // only sparse rows, which --max_memory_mb bounds first.
    s = OutOfMemoryError("push");
  }
  // Never left in flight: a retry gets this answer.
  dedup_.Finish(req.request_id(), s);
  return s;
}

absl::Status RequestHandler::PushDense(const PushRequest& req,
                                       PushResponse* resp,
                                       const DenseValueLane* lane) {
  std::vector<BlockData> blocks;
  std::vector<std::vector<float>> scratch;
  std::unique_ptr<float[]> lane_copy;
  absl::StatusOr<std::vector<DenseTableBlock*>> units =
      ResolveDense(req.blocks(), store_);
  absl::Status s = units.status();
  if (s.ok()) {
    s = req.shared_region() != 0 || lane != nullptr
            ? CopyFromLane(req, *units, lane, &blocks, &lane_copy)
            : ToBlockData(req.blocks(), *units, &blocks, &scratch);
  }
  int late = 0;
  if (s.ok()) {
    s = store_->Push(req.trainer_id(), req.step(), blocks, req.generation(),
                     &late, req.request_id());
  }
  resp->set_late_blocks(late);
  return s;
}

absl::Status RequestHandler::OpenTcpLane(const TcpLaneRequest& req,
                                         TcpLaneResponse* /*resp*/) {
  if (!store_->ready()) {
    return absl::FailedPreconditionError(
        "TCP lane: the job is not initialized on this pserver yet");
  }
  const int k = req.trainer_id();
  if (k < 0 || k >= store_->job().num_trainers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP lane: trainer id ", k, " is not in [0, ",
                     store_->job().num_trainers(), ")"));
  }
  if (store_->job().replication() > 1) {
    return absl::FailedPreconditionError(
        "TCP lane: a replicated job's dense values stay in gRPC (its shards "
        "move between pservers)");
  }
  return store_->CheckIncarnation(k, req.incarnation());
}

absl::Status RequestHandler::ExportRows(const ExportRowsRequest& req,
                                        ExportRowsResponse* resp) {
  if (req.trainer_id() != 0) {
    return absl::PermissionDeniedError(
        "only the chief (trainer 0) reads a sparse table's rows (--save_dir)");
  }
  if (!store_->ready()) {
    return absl::FailedPreconditionError(
        "ExportRows: the job is not initialized on this pserver");
  }
  RETURN_IF_ERROR(store_->CheckGeneration("ExportRows", req.generation()));
  return ExportRowsPage(store_, req, resp);
}

absl::Status RequestHandler::PushSparse(const PushRequest& req) {
  std::vector<SparseGrads> rows;
  std::vector<std::vector<float>> scratch(req.sparse_size());
  for (int i = 0; i < req.sparse_size(); ++i) {
    const SparseRows& r = req.sparse(i);
    auto keys = ViewKeys(r.keys());
    auto grads = ViewFloat32(r.values(), &scratch[i]);
    if (!keys.ok() || !grads.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse rows of table id ", r.table_id(), ": ",
                       (keys.ok() ? grads.status() : keys.status()).message()));
    }
    rows.push_back(
        SparseGrads{r.table_id(), *keys, *grads, r.num_chunks(), r.shard()});
  }
  return store_->PushSparse(req.trainer_id(), req.step(), rows,
                            req.generation(), req.request_id());
}

}  // namespace shardps
