#include "pserver/ps_service_impl.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "compression/threshold_codec.h"
#include "compression/value_encoding.h"
#include "glog/logging.h"

namespace shardps {
namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx,
                                const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

// Views the float32 little-endian bytes of `bytes` as floats. Protobuf keeps
// `bytes` fields in heap strings, which are aligned for float; a misaligned
// buffer (never seen) is copied into `scratch`.
absl::StatusOr<absl::Span<const float>> AsFloats(const std::string& bytes,
                                                 std::vector<float>* scratch) {
  if (bytes.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("values have ", bytes.size(),
                     " bytes, not a whole number of float32 values"));
  }
  const size_t n = bytes.size() / sizeof(float);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0) {
    return absl::MakeConstSpan(reinterpret_cast<const float*>(bytes.data()), n);
  }
  scratch->resize(n);
  std::memcpy(scratch->data(), bytes.data(), bytes.size());
  return absl::MakeConstSpan(*scratch);
}

// Views little-endian uint64 keys in `bytes` (protobuf keeps `bytes` in
// buffers aligned for them).
absl::StatusOr<absl::Span<const uint64_t>> AsKeys(const std::string& bytes) {
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

absl::Status ToBlockData(
    const google::protobuf::RepeatedPtrField<DenseBlock>& blocks,
    const ParameterStore& store, std::vector<BlockData>* out,
    std::vector<std::vector<float>>* scratch) {
  out->reserve(blocks.size());
  scratch->resize(blocks.size());
  for (int i = 0; i < blocks.size(); ++i) {
    const DenseBlock& b = blocks[i];
    absl::StatusOr<absl::Span<const float>> values;
    switch (b.encoding()) {
      case FLOAT32:
        values = AsFloats(b.values(), &(*scratch)[i]);
        break;
      case FLOAT16:
      case BFLOAT16: {
        (*scratch)[i].resize(b.values().size() / 2);
        absl::Status st = DecodeValues(b.values(), b.encoding(),
                                       absl::MakeSpan((*scratch)[i]));
        if (b.values().size() % 2 != 0) {
          st = absl::InvalidArgumentError(
              absl::StrCat("values have ", b.values().size(),
                           " bytes, not a whole number of 16-bit values"));
        }
        if (st.ok()) {
          values = absl::MakeConstSpan((*scratch)[i]);
        } else {
          values = st;
        }
        break;
      }
      case THRESHOLD: {
        // A threshold or bitmap message of the block's gradient; empty
        // bytes mean a zero gradient (nothing reached the threshold).
        auto size = store.BlockSize(b.table_id(), b.block());
        if (!size.ok()) {
          values = size.status();
          break;
        }
        (*scratch)[i].assign(*size, 0.0f);
        absl::Status st = absl::OkStatus();
        if (!b.values().empty()) {
          st = DecodeAddBytes(b.values(), absl::MakeSpan((*scratch)[i]));
        }
        if (st.ok()) {
          values = absl::MakeConstSpan((*scratch)[i]);
        } else {
          values = st;
        }
        break;
      }
      default:
        values = absl::InvalidArgumentError(
            absl::StrCat("values in unknown encoding ", b.encoding()));
    }
    if (!values.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table id ", b.table_id(), " block ", b.block(), ": ",
                       values.status().message()));
    }
    out->push_back(BlockData{b.table_id(), b.block(), *values});
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* PsServiceImpl::InitJob(
    grpc::CallbackServerContext* ctx, const InitJobRequest* req,
    InitJobResponse* resp) {
  if (req->trainer_id() != 0) {
    return Reply(ctx, absl::PermissionDeniedError(absl::StrCat(
                          "InitJob from trainer ", req->trainer_id(),
                          ": only the chief (trainer 0) initialises the job")));
  }
  std::vector<BlockId> blocks;
  blocks.reserve(req->blocks_size());
  for (const BlockRef& r : req->blocks()) {
    blocks.push_back(BlockId{r.table_id(), r.block()});
  }
  auto ready = store_->InitJob(req->job(), blocks);
  if (ready.ok()) resp->set_already_ready(*ready);
  return Reply(ctx, ready.status());
}

grpc::ServerUnaryReactor* PsServiceImpl::SetInitialValues(
    grpc::CallbackServerContext* ctx, const SetInitialValuesRequest* req,
    SetInitialValuesResponse* resp) {
  std::vector<BlockData> blocks;
  std::vector<std::vector<float>> scratch;
  absl::Status s = ToBlockData(req->blocks(), *store_, &blocks, &scratch);
  if (s.ok()) s = store_->SetInitialValues(blocks);
  return Reply(ctx, s);
}

grpc::ServerUnaryReactor* PsServiceImpl::CommitInit(
    grpc::CallbackServerContext* ctx, const CommitInitRequest* req,
    CommitInitResponse* resp) {
  return Reply(ctx, store_->CommitInit());
}

grpc::ServerUnaryReactor* PsServiceImpl::Register(
    grpc::CallbackServerContext* ctx, const RegisterRequest* req,
    RegisterResponse* resp) {
  if (req->trainer_id() < 0) {
    return Reply(ctx, absl::InvalidArgumentError(absl::StrCat(
                          "negative trainer_id ", req->trainer_id())));
  }
  if (store_->ready() && req->trainer_id() >= store_->job().num_trainers()) {
    return Reply(ctx, absl::InvalidArgumentError(absl::StrCat(
                          "trainer_id ", req->trainer_id(),
                          " is out of range: the job has ",
                          store_->job().num_trainers(), " trainers")));
  }
  if (req->confirm()) {
    absl::Status s = store_->ConfirmJoin(req->trainer_id(), req->incarnation(),
                                         req->start_step());
    resp->set_job_ready(store_->ready());
    resp->set_join_step(req->start_step());
    resp->set_generation(store_->generation());
    return Reply(ctx, s);
  }
  auto r = store_->Register(req->trainer_id(), req->incarnation(), absl::Now());
  if (!r.ok()) return Reply(ctx, r.status());
  LOG(INFO) << "trainer " << req->trainer_id() << " registered (incarnation "
            << req->incarnation() << ", from " << ctx->peer() << ")";
  resp->set_job_ready(r->job_ready);
  resp->set_join_step(r->join_step);
  resp->set_generation(r->generation);
  return Reply(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* PsServiceImpl::Heartbeat(
    grpc::CallbackServerContext* ctx, const HeartbeatRequest* req,
    HeartbeatResponse* resp) {
  return Reply(ctx, store_->Heartbeat(req->trainer_id(), req->incarnation(),
                                      absl::Now()));
}

grpc::ServerUnaryReactor* PsServiceImpl::Leave(grpc::CallbackServerContext* ctx,
                                               const LeaveRequest* req,
                                               LeaveResponse* resp) {
  return Reply(ctx, store_->Leave(req->trainer_id(), req->incarnation()));
}

grpc::ServerUnaryReactor* PsServiceImpl::Checkpoint(
    grpc::CallbackServerContext* ctx, const CheckpointRequest* req,
    CheckpointResponse* resp) {
  if (checkpointer_ == nullptr) {
    return Reply(ctx, absl::FailedPreconditionError(
                          "checkpoint requested, but this pserver was started "
                          "without --checkpoint_dir"));
  }
  if (req->trainer_id() != 0) {
    return Reply(ctx, absl::PermissionDeniedError(
                          "only the chief (trainer 0) asks for checkpoints"));
  }
  if (req->step() < 0 || req->step() > kMaxCheckpointStep) {
    return Reply(ctx, absl::InvalidArgumentError(absl::StrCat(
                          "checkpoint step ", req->step(), " out of range")));
  }
  // Not while a rollback runs: a snapshot of the abandoned timeline must
  // not be saved after the rollback discarded its checkpoints.
  absl::MutexLock l(&rollback_mu_);
  if (store_->ready()) {
    absl::Status s = store_->CheckGeneration("checkpoint", req->generation());
    if (!s.ok()) return Reply(ctx, s);
  }
  auto snap = store_->Snapshot(req->step());
  if (!snap.ok()) return Reply(ctx, snap.status());
  checkpointer_->Save(std::move(*snap));
  return Reply(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* PsServiceImpl::Rollback(
    grpc::CallbackServerContext* ctx, const RollbackRequest* req,
    RollbackResponse* resp) {
  if (checkpointer_ == nullptr) {
    return Reply(ctx, absl::FailedPreconditionError(
                          "rollback requested, but this pserver was started "
                          "without --checkpoint_dir"));
  }
  absl::MutexLock l(&rollback_mu_);
  if (store_->ready() && store_->generation() == req->generation() &&
      store_->base_step() == req->step()) {
    return Reply(ctx, absl::OkStatus());  // done already, by another trainer
  }
  if (store_->ready() && req->generation() <= store_->generation()) {
    // Generations only grow; this trainer saw an older state.
    return Reply(ctx, absl::AbortedError(absl::StrCat(
                          "rollback to generation ", req->generation(),
                          ": this pserver is on generation ",
                          store_->generation(), " already; look again")));
  }
  absl::Status s = checkpointer_->Flush();
  if (!s.ok()) {
    LOG(WARNING) << "rollback: the last checkpoint write had failed: " << s;
  }
  auto snap = checkpointer_->Load(req->step());
  if (!snap.ok()) {
    return Reply(ctx, absl::FailedPreconditionError(
                          absl::StrCat("rollback to step ", req->step(), ": ",
                                       snap.status().message())));
  }
  s = checkpointer_->WriteGeneration(req->generation());
  if (s.ok()) s = store_->Restore(*snap, req->generation());
  if (s.ok()) s = checkpointer_->DiscardNewerThan(req->step());
  LOG(WARNING) << "rollback to step " << req->step() << " (generation "
               << req->generation() << ") asked by trainer "
               << req->trainer_id() << ": " << (s.ok() ? "done" : s.ToString());
  return Reply(ctx, s);
}

grpc::ServerUnaryReactor* PsServiceImpl::GetStatus(
    grpc::CallbackServerContext* ctx, const GetStatusRequest* req,
    GetStatusResponse* resp) {
  resp->set_job_ready(store_->ready());
  if (store_->ready()) {
    *resp->mutable_job() = store_->job();
    const auto v = store_->Versions();
    resp->set_min_version(v.min);
    resp->set_max_version(v.max);
    for (int k : store_->LiveTrainers()) resp->add_live_trainers(k);
  }
  resp->set_generation(store_->generation());
  resp->set_base_step(store_->base_step());
  resp->set_checkpoints_enabled(checkpointer_ != nullptr);
  if (checkpointer_ != nullptr) {
    auto steps = checkpointer_->Steps();
    if (!steps.ok()) return Reply(ctx, steps.status());
    for (int64_t s : *steps) resp->add_checkpoint_steps(s);
  }
  return Reply(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* PsServiceImpl::Pull(grpc::CallbackServerContext* ctx,
                                              const PullRequest* req,
                                              PullResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const ValueEncoding encoding = req->encoding();
  if (encoding != FLOAT32 && encoding != FLOAT16 && encoding != BFLOAT16) {
    reactor->Finish(ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("pull encoding ", ValueEncoding_Name(encoding),
                     ": pulls come as FLOAT32, FLOAT16 or BFLOAT16"))));
    return reactor;
  }
  absl::Status replaced =
      store_->CheckIncarnation(req->trainer_id(), req->incarnation());
  if (!replaced.ok()) {
    reactor->Finish(ToGrpcStatus(replaced));
    return reactor;
  }
  std::vector<BlockId> blocks;
  blocks.reserve(req->blocks_size());
  for (const BlockRef& r : req->blocks()) {
    blocks.push_back(BlockId{r.table_id(), r.block()});
  }
  resp->mutable_blocks()->Reserve(req->blocks_size());
  // Sparse rows are written straight into the reply's buffers.
  std::vector<SparsePull> sparse;
  for (const SparseRows& r : req->sparse()) {
    auto dim = store_->SparseDim(r.table_id());
    auto keys = AsKeys(r.keys());
    if (!dim.ok() || !keys.ok()) {
      resp->Clear();
      reactor->Finish(ToGrpcStatus(dim.ok() ? keys.status() : dim.status()));
      return reactor;
    }
    SparseRows* out = resp->add_sparse();
    out->set_table_id(r.table_id());
    out->mutable_values()->resize(keys->size() * *dim * sizeof(float));
    sparse.push_back(
        SparsePull{r.table_id(), *keys,
                   reinterpret_cast<float*>(out->mutable_values()->data())});
  }
  store_->Pull(
      req->trainer_id(), req->min_version(), req->step(), req->min_clock(),
      blocks, sparse,
      [resp, encoding](uint32_t table_id, uint32_t block, int64_t version,
                       absl::Span<const float> values) {
        DenseBlock* b = resp->add_blocks();
        b->set_table_id(table_id);
        b->set_block(block);
        b->set_version(version);
        b->set_encoding(encoding);
        EncodeValues(values, encoding, b->mutable_values());
      },
      [reactor, resp](absl::Status s, absl::Duration waited) {
        if (!s.ok()) resp->Clear();
        resp->set_wait_micros(absl::ToInt64Microseconds(waited));
        reactor->Finish(ToGrpcStatus(s));
      },
      req->generation());
  return reactor;
}

grpc::ServerUnaryReactor* PsServiceImpl::Push(grpc::CallbackServerContext* ctx,
                                              const PushRequest* req,
                                              PushResponse* resp) {
  if (req->request_id() == 0) {
    return Reply(ctx, absl::InvalidArgumentError(
                          "push without request_id: every push carries a "
                          "non-zero id so that a retry is applied once"));
  }
  absl::Status first;
  switch (dedup_.Begin(req->request_id(), &first)) {
    case RequestDedup::Outcome::kDone:
      return Reply(ctx, first);
    case RequestDedup::Outcome::kInFlight:
      return Reply(ctx, absl::UnavailableError(
                            absl::StrCat("push ", req->request_id(),
                                         " is still being applied; retry")));
    case RequestDedup::Outcome::kNew:
      break;
  }
  absl::Status s =
      store_->CheckIncarnation(req->trainer_id(), req->incarnation());
  if (!s.ok()) {
    // a replaced process: nothing is applied
  } else if (req->blocks_size() > 0 && req->sparse_size() > 0) {
    s = absl::InvalidArgumentError(
        "a push carries dense blocks or sparse rows, not both");
  } else if (req->sparse_size() > 0) {
    std::vector<SparseGrads> rows;
    std::vector<std::vector<float>> scratch(req->sparse_size());
    for (int i = 0; s.ok() && i < req->sparse_size(); ++i) {
      const SparseRows& r = req->sparse(i);
      auto keys = AsKeys(r.keys());
      auto grads = AsFloats(r.values(), &scratch[i]);
      if (!keys.ok() || !grads.ok()) {
        s = absl::InvalidArgumentError(absl::StrCat(
            "sparse rows of table id ", r.table_id(), ": ",
            (keys.ok() ? grads.status() : keys.status()).message()));
        break;
      }
      rows.push_back(SparseGrads{r.table_id(), *keys, *grads, r.num_chunks()});
    }
    if (s.ok()) {
      s = store_->PushSparse(req->trainer_id(), req->step(), rows,
                             req->generation());
    }
  } else {
    std::vector<BlockData> blocks;
    std::vector<std::vector<float>> scratch;
    s = ToBlockData(req->blocks(), *store_, &blocks, &scratch);
    int late = 0;
    if (s.ok()) {
      s = store_->Push(req->trainer_id(), req->step(), blocks,
                       req->generation(), &late);
    }
    resp->set_late_blocks(late);
  }
  dedup_.Finish(req->request_id(), s);
  return Reply(ctx, s);
}

}  // namespace shardps
