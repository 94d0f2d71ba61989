#include "trainer/client/param_client.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/transport/wire_limits.h"
#include "compression/value_encoding.h"
#include "glog/logging.h"
#include "trainer/client/table_norms.h"

namespace shardps {
namespace {

// A pserver's answer to a call that names a shared region it does not hold
// (RequestHandler::RegionOf).
bool IsLostRegion(const absl::Status& s) {
  return absl::IsNotFound(s) && absl::StrContains(s.message(), "shared region");
}

// A shared call whose reply did not fit its slot (SharedCallServer).
bool IsTooLargeForSlot(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         absl::StartsWith(s.message(), "shared call:");
}

// How long a shared call waits for its answer before going over TCP, as
// long as one attempt of a gRPC call (RpcOptions).
constexpr absl::Duration kSharedCallDeadline = absl::Seconds(60);

}  // namespace

template <typename Request, typename Response>
void ParamClient::SendThrough(SharedLane* lane, shared_calls::Method method,
                              const Request& req, Response* resp,
                              std::function<void(StatusCallback)> over_grpc,
                              StatusCallback done) {
  if (lane != nullptr && lane->caller != nullptr &&
      lane->caller->TryCall(method, req, resp,
                            [resp, over_grpc, done](absl::Status s) {
                              if (!IsTooLargeForSlot(s)) {
                                done(std::move(s));
                                return;
                              }
                              // A pull's reply with many blocks: again over
                              // gRPC (a push keeps its request id, so it is
                              // applied once).
                              resp->Clear();
                              over_grpc(done);
                            })) {
    return;
  }
  over_grpc(std::move(done));
}

ParamClient::ParamClient(std::vector<PsClientInterface*> servers,
                         RequestStamp* stamp,
                         std::vector<DenseTableLayout> tables)
    : servers_(std::move(servers)),
      stamp_(stamp),
      tables_(std::move(tables)),
      chunks_(PlanChunks(tables_, static_cast<int>(servers_.size()),
                         kMaxChunkBytes)) {}

void ParamClient::set_threshold_compression(
    const ThresholdPushEncoder::Options& o) {
  std::vector<int64_t> sizes;
  for (const DenseTableLayout& t : tables_) sizes.push_back(t.num_values);
  threshold_ = std::make_unique<ThresholdPushEncoder>(o, std::move(sizes));
}

absl::Status ParamClient::MarkDone(int64_t steps) {
  std::vector<std::unique_ptr<PendingPush>> calls;
  for (PsClientInterface* server : servers_) {
    auto p = std::make_unique<PendingPush>();
    p->server = server;
    stamp_->Stamp(&p->req);
    p->req.set_step(steps);
    p->req.set_request_id(stamp_->NextRequestId());
    calls.push_back(std::move(p));
  }
  return SendPushes(calls, nullptr);
}

absl::Status ParamClient::TakePulled(
    const std::vector<BlockPlacement>& chunk, const PsClientInterface& server,
    const PullResponse& resp, const std::vector<float*>& values,
    const SharedLane* lane, const std::vector<uint64_t>* shared_at) const {
  if (resp.blocks_size() != static_cast<int>(chunk.size())) {
    return absl::DataLossError(
        absl::StrCat("pull from ", server.address(), ": asked for ",
                     chunk.size(), " blocks, got ", resp.blocks_size()));
  }
  for (int j = 0; j < resp.blocks_size(); ++j) {
    const DenseBlock& got = resp.blocks(j);
    const BlockPlacement& want = chunk[j];
    if (shared_at != nullptr) {
      if (got.table_id() != want.table_id || got.block() != want.block ||
          got.encoding() != FLOAT32 || !got.values().empty() ||
          got.shared_offset() != (*shared_at)[j]) {
        return absl::DataLossError(
            absl::StrCat("pull from ", server.address(), ": block ", j,
                         " of the reply does not match the request"));
      }
      std::memcpy(values[want.table_id] + want.offset,
                  lane->region->data() + got.shared_offset(),
                  static_cast<size_t>(want.size) * sizeof(float));
      continue;
    }
    if (got.table_id() != want.table_id || got.block() != want.block ||
        got.encoding() != pull_encoding_ ||
        !DecodeValues(
             got.values(), got.encoding(),
             absl::MakeSpan(values[want.table_id] + want.offset, want.size))
             .ok()) {
      return absl::DataLossError(
          absl::StrCat("pull from ", server.address(), ": block ", j,
                       " of the reply does not match the request"));
    }
  }
  return absl::OkStatus();
}

DenseTransfer::DenseTransfer(int calls) : state_(std::make_shared<State>()) {
  absl::MutexLock l(&state_->mu);
  state_->pending = calls;
}

absl::Status DenseTransfer::Wait(TransferStats* stats) {
  {
    State& st = *state_;
    absl::MutexLock l(&st.mu);
    st.mu.Await(absl::Condition(
        +[](State* s)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->pending == 0; },
        &st));
  }
  if (stats != nullptr) *stats = stats_ ? stats_() : TransferStats{};
  return state_->error.Get();
}

bool DenseTransfer::Done() const {
  absl::MutexLock l(&state_->mu);
  return state_->pending == 0;
}

StatusCallback DenseTransfer::OneDone() {
  return [state = state_](absl::Status s) {
    state->error.Add(s);
    absl::MutexLock l(&state->mu);
    --state->pending;
  };
}

void ParamClient::CancelSharedCalls() {
  for (const std::unique_ptr<SharedLane>& lane : lanes_) {
    if (lane != nullptr && lane->caller != nullptr) {
      lane->caller->CancelPending();
    }
  }
}

ParamClient::SharedLane* ParamClient::PushLane(size_t s) const {
  if (s >= lanes_.size() || lanes_[s] == nullptr || lanes_[s]->lost.load() ||
      lanes_[s]->push_at.empty() || threshold_ != nullptr ||
      push_encoding_ != FLOAT32) {
    return nullptr;
  }
  return lanes_[s].get();
}

ParamClient::SharedLane* ParamClient::PullLane(size_t s) const {
  if (s >= lanes_.size() || lanes_[s] == nullptr || lanes_[s]->lost.load() ||
      lanes_[s]->pull_at.empty() || pull_encoding_ != FLOAT32) {
    return nullptr;
  }
  return lanes_[s].get();
}

int ParamClient::shared_servers() const {
  int n = 0;
  for (size_t s = 0; s < lanes_.size(); ++s) {
    n += PushLane(s) != nullptr || PullLane(s) != nullptr;
  }
  return n;
}

int ParamClient::UseSharedMemory(bool calls) {
  lanes_.clear();
  lanes_.resize(servers_.size());
  // A push area only when pushes are float32 (threshold and half-precision
  // pushes stay on TCP), a pull area only when pulls are.
  const bool pushes = push_encoding_ == FLOAT32 && threshold_ == nullptr;
  const bool pulls = pull_encoding_ == FLOAT32;
  if (!pushes && !pulls) return 0;  // nothing would go through a region
  int n = 0;
  for (size_t s = 0; s < servers_.size(); ++s) {
    auto lane = std::make_unique<SharedLane>();
    // Pushes first, then pulls, each block at the next float32 offset.
    const uint64_t start =
        SharedRegion::kHeaderBytes + (calls ? shared_calls::kAreaBytes : 0);
    uint64_t at = start;
    std::vector<std::vector<std::vector<uint64_t>>*> areas;
    if (pushes) areas.push_back(&lane->push_at);
    if (pulls) areas.push_back(&lane->pull_at);
    for (auto* where : areas) {
      for (const auto& chunk : chunks_[s]) {
        where->emplace_back();
        for (const BlockPlacement& b : chunk) {
          where->back().push_back(at);
          at += static_cast<uint64_t>(b.size) * sizeof(float);
        }
      }
    }
    if (at == start) {
      LOG(INFO) << "pserver " << servers_[s]->address()
                << ": holds no dense block of this job, no shared memory";
      continue;
    }
    SharedMemoryRequest req;
    req.set_trainer_id(stamp_->trainer_id());
    req.set_incarnation(stamp_->incarnation());
    req.set_bytes(at);
    req.set_calls(calls);
    SharedMemoryResponse resp;
    absl::Status st = servers_[s]->OpenSharedMemory(req, &resp);
    absl::StatusOr<std::unique_ptr<SharedRegion>> region =
        st.ok() ? SharedRegion::Attach(static_cast<pid_t>(resp.pid()),
                                       resp.fd(), resp.bytes(), resp.token())
                : st;
    if (!region.ok() || (*region)->size() < at) {
      LOG(INFO) << "pserver " << servers_[s]->address()
                << ": dense values go over TCP, not shared memory ("
                << (region.ok() ? "region too small"
                                : std::string(region.status().message()))
                << ")";
      continue;
    }
    lane->region = *std::move(region);
    lane->id = resp.region_id();
    if (resp.calls()) {
      absl::StatusOr<std::unique_ptr<SharedCaller>> caller =
          SharedCaller::Create(lane->region.get(),
                               static_cast<pid_t>(resp.pid()),
                               kSharedCallDeadline);
      if (caller.ok()) {
        lane->caller = *std::move(caller);
      } else {
        LOG(INFO) << "pserver " << servers_[s]->address()
                  << ": pushes and pulls go over gRPC ("
                  << caller.status().message() << ")";
      }
    }
    lanes_[s] = std::move(lane);
    ++n;
  }
  return n;
}

absl::Status ParamClient::Pull(int64_t min_version, int64_t step,
                               const std::vector<float*>& values,
                               TransferStats* stats, int64_t min_clock) {
  return StartPull(min_version, step, values, min_clock)->Wait(stats);
}

struct ParamClient::PullCall {
  std::vector<BlockPlacement> chunk;  // of the tables asked for
  PsClientInterface* server;
  SharedLane* lane;          // null: TCP
  std::vector<uint64_t> at;  // where each block is in the lane's region
  const std::vector<uint64_t>* shared_at;  // &at, or null over TCP
  PullRequest req;
  PullResponse resp;
};

std::unique_ptr<DenseTransfer> ParamClient::StartPull(
    int64_t min_version, int64_t step, const std::vector<float*>& values,
    int64_t min_clock, int64_t own_clock, const std::vector<bool>* only) {
  auto calls = std::make_shared<std::vector<std::unique_ptr<PullCall>>>();
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (size_t c = 0; c < chunks_[s].size(); ++c) {
      std::unique_ptr<PullCall> p = MakePullCall(s, c, only);
      if (p == nullptr) continue;
      p->req.set_min_version(min_version);
      p->req.set_step(step);
      p->req.set_min_clock(min_clock);
      p->req.set_own_clock(own_clock);
      calls->push_back(std::move(p));
    }
  }
  std::unique_ptr<DenseTransfer> t =
      DenseTransfer::Of(calls, [](const PullCall& p, TransferStats* stats) {
        stats->bytes += static_cast<int64_t>(p.resp.ByteSizeLong());
        if (p.shared_at != nullptr) {  // and the values, through the region
          for (const BlockPlacement& b : p.chunk) {
            stats->bytes += b.size * static_cast<int64_t>(sizeof(float));
          }
        }
        stats->server_wait_us =
            std::max(stats->server_wait_us, p.resp.wait_micros());
        for (const DenseBlock& b : p.resp.blocks()) {
          stats->min_version = stats->min_version < 0
                                   ? b.version()
                                   : std::min(stats->min_version, b.version());
        }
      });
  for (const auto& call : *calls) SendPull(call.get(), values, t->OneDone());
  return t;
}

std::unique_ptr<ParamClient::PullCall> ParamClient::MakePullCall(
    size_t s, size_t c, const std::vector<bool>* only) const {
  SharedLane* lane = PullLane(s);
  auto p = std::make_unique<PullCall>();
  for (size_t j = 0; j < chunks_[s][c].size(); ++j) {
    const BlockPlacement& b = chunks_[s][c][j];
    if (only != nullptr && !(*only)[b.table_id]) continue;
    p->chunk.push_back(b);
    if (lane != nullptr) p->at.push_back(lane->pull_at[c][j]);
  }
  if (p->chunk.empty()) return nullptr;
  p->server = servers_[s];
  p->lane = lane;
  p->shared_at = lane != nullptr ? &p->at : nullptr;
  if (lane != nullptr) p->req.set_shared_region(lane->id);
  stamp_->Stamp(&p->req);
  p->req.set_encoding(pull_encoding_);
  for (size_t j = 0; j < p->chunk.size(); ++j) {
    BlockRef* r = p->req.add_blocks();
    r->set_table_id(p->chunk[j].table_id);
    r->set_block(p->chunk[j].block);
    if (lane != nullptr) r->set_shared_offset(p->at[j]);
  }
  return p;
}

void ParamClient::SendPull(PullCall* p, const std::vector<float*>& values,
                           StatusCallback done) const {
  SendThrough(
      p->lane, shared_calls::kPull, p->req, &p->resp,
      [p](StatusCallback cb) {
        p->server->PullAsync(p->req, &p->resp, std::move(cb));
      },
      [this, p, values, done](absl::Status s) {
        if (p->lane != nullptr && IsLostRegion(s)) {
          // Again over TCP (a pull changes nothing on the pserver).
          p->lane->lost.store(true);
          LOG(WARNING) << s.message();
          p->req.clear_shared_region();
          for (BlockRef& r : *p->req.mutable_blocks()) r.clear_shared_offset();
          p->lane = nullptr;
          p->shared_at = nullptr;
          p->resp.Clear();
          p->server->PullAsync(p->req, &p->resp,
                               [this, p, values, done](absl::Status s) {
                                 if (s.ok()) {
                                   s = TakePulled(p->chunk, *p->server, p->resp,
                                                  values, nullptr, nullptr);
                                 }
                                 done(s);
                               });
          return;
        }
        if (s.ok()) {
          s = TakePulled(p->chunk, *p->server, p->resp, values, p->lane,
                         p->shared_at);
        }
        done(s);
      });
}

absl::Status ParamClient::Push(int64_t step,
                               const std::vector<const float*>& grads,
                               TransferStats* stats) {
  ASSIGN_OR_RETURN(std::unique_ptr<DenseTransfer> t, StartPush(step, grads));
  return t->Wait(stats);
}

// Float32 values go from the gradients as they are (the transport may send
// them without copying); other encodings into buffers of their own.
struct ParamClient::PushCall {
  PsClientInterface* server;
  DensePush push;
  std::vector<std::string> encoded;
  PushResponse resp;
  // Through a shared region: the values where they are, and the id, for
  // sending again over TCP.
  SharedLane* lane = nullptr;
  std::vector<absl::string_view> tcp_bytes;
  uint64_t tcp_request_id = 0;
  PushRequest shared_req;  // the push as a shared call sends it
};

absl::StatusOr<std::unique_ptr<DenseTransfer>> ParamClient::StartPush(
    int64_t step, const std::vector<const float*>& grads,
    const std::vector<bool>* only) {
  auto calls = std::make_shared<std::vector<std::unique_ptr<PushCall>>>();
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (size_t c = 0; c < chunks_[s].size(); ++c) {
      const std::vector<BlockPlacement>& chunk = chunks_[s][c];
      if (only != nullptr &&
          std::none_of(chunk.begin(), chunk.end(),
                       [only](const auto& b) { return (*only)[b.table_id]; })) {
        continue;
      }
      auto p = std::make_unique<PushCall>();
      RETURN_IF_ERROR(FillPushCall(s, c, step, grads, only, p.get()));
      calls->push_back(std::move(p));
    }
  }
  std::unique_ptr<DenseTransfer> t =
      DenseTransfer::Of(calls, [](const PushCall& p, TransferStats* stats) {
        stats->bytes += static_cast<int64_t>(DensePushByteSize(p.push));
        if (p.push.header.shared_region() != 0) {  // values in the region
          for (absl::string_view v : p.tcp_bytes) {
            stats->bytes += static_cast<int64_t>(v.size());
          }
        }
      });
  for (const auto& call : *calls) SendPush(call.get(), t->OneDone());
  return t;
}

absl::Status ParamClient::FillPushCall(size_t s, size_t c, int64_t step,
                                       const std::vector<const float*>& grads,
                                       const std::vector<bool>* only,
                                       PushCall* p) {
  const std::vector<BlockPlacement>& chunk = chunks_[s][c];
  SharedLane* lane = PushLane(s);
  p->server = servers_[s];
  stamp_->Stamp(&p->push.header);
  p->push.header.set_step(step);
  p->push.header.set_request_id(stamp_->NextRequestId());
  if (lane != nullptr) {
    p->lane = lane;
    p->push.header.set_shared_region(lane->id);
    p->tcp_request_id = stamp_->NextRequestId();
  }
  const bool copy = threshold_ != nullptr || push_encoding_ != FLOAT32;
  if (copy) p->encoded.resize(chunk.size());
  for (size_t j = 0; j < chunk.size(); ++j) {
    const BlockPlacement& b = chunk[j];
    if (only != nullptr && !(*only)[b.table_id]) continue;
    const absl::Span<const float> g(grads[b.table_id] + b.offset, b.size);
    DenseValuesRef ref{b.table_id, b.block, push_encoding_, {}};
    if (threshold_ != nullptr) {
      ref.encoding = THRESHOLD;
      RETURN_IF_ERROR(
          threshold_->Encode(b.table_id, b.block, b.offset, g, &p->encoded[j]));
    } else if (copy) {
      EncodeValues(g, push_encoding_, &p->encoded[j]);
    }
    ref.bytes = copy
                    ? absl::string_view(p->encoded[j])
                    : absl::string_view(reinterpret_cast<const char*>(g.data()),
                                        g.size() * sizeof(float));
    if (lane != nullptr) {
      ref.shared_offset = lane->push_at[c][j];
      std::memcpy(lane->region->data() + ref.shared_offset, ref.bytes.data(),
                  ref.bytes.size());
      p->tcp_bytes.push_back(ref.bytes);
      ref.bytes = absl::string_view();
    }
    p->push.blocks.push_back(ref);
  }
  return absl::OkStatus();
}

void ParamClient::SendPush(PushCall* p, StatusCallback done) {
  if (p->lane == nullptr) {
    p->server->PushDenseAsync(p->push, &p->resp, std::move(done));
    return;
  }
  p->shared_req = ToPushRequest(p->push);
  SendThrough(
      p->lane, shared_calls::kPush, p->shared_req, &p->resp,
      [p](StatusCallback cb) {
        p->server->PushDenseAsync(p->push, &p->resp, std::move(cb));
      },
      [p, done](absl::Status st) {
        if (!IsLostRegion(st)) {
          done(st);
          return;
        }
        // Refused before anything was applied: again over TCP, under a
        // new id (the pserver remembers the refusal under the old one).
        LOG(WARNING) << st.message();
        p->lane->lost.store(true);
        p->push.header.clear_shared_region();
        p->push.header.set_request_id(p->tcp_request_id);
        for (size_t j = 0; j < p->push.blocks.size(); ++j) {
          p->push.blocks[j].bytes = p->tcp_bytes[j];
          p->push.blocks[j].shared_offset = 0;
        }
        p->resp.Clear();
        p->server->PushDenseAsync(p->push, &p->resp, done);
      });
}

absl::Status ParamClient::ExchangeTableNorms(int64_t step,
                                             const std::vector<bool>& lars) {
  return TableNormExchange(servers_, chunks_, stamp_).Exchange(step, lars);
}

}  // namespace shardps
