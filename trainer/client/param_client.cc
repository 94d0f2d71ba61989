#include "trainer/client/param_client.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/transport/dense_pull.h"
#include "common/transport/wire_limits.h"
#include "compression/value_encoding.h"
#include "glog/logging.h"
#include "trainer/client/table_norms.h"

namespace shardps {
namespace {

// Defers the calls of `lanes` (TcpLanePsClient::set_defer) while it lives:
// around a transfer that its thread waits for at once, which carries them.
class DeferLaneCalls {
 public:
  explicit DeferLaneCalls(
      const std::vector<std::unique_ptr<TcpLanePsClient>>& lanes)
      : lanes_(lanes) {
    for (const auto& c : lanes_) {
      if (c != nullptr) c->set_defer(true);
    }
  }
  ~DeferLaneCalls() {
    for (const auto& c : lanes_) {
      if (c != nullptr) c->set_defer(false);
    }
  }
  DeferLaneCalls(const DeferLaneCalls&) = delete;
  DeferLaneCalls& operator=(const DeferLaneCalls&) = delete;

 private:
  const std::vector<std::unique_ptr<TcpLanePsClient>>& lanes_;
};

}  // namespace

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

void ParamClient::CancelSharedCalls() {
  for (const std::unique_ptr<SharedMemoryPsClient>& c : shared_) {
    if (c != nullptr) c->CancelSharedCalls();
  }
  for (const std::unique_ptr<TcpLanePsClient>& c : tcp_) {
    if (c != nullptr) c->CancelCalls();
  }
}

int ParamClient::UseTcpLane(const TcpLanePsClient::Options& options) {
  tcp_.clear();
  tcp_.resize(servers_.size());
  // Float32 and 16-bit values; threshold messages stay on gRPC.
  const bool pushes = push_encoding_ != THRESHOLD && threshold_ == nullptr;
  const bool pulls = pull_encoding_ != THRESHOLD;
  if (!pushes && !pulls) return 0;
  int n = 0;
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (s < shared_.size() && shared_[s] != nullptr) continue;
    if (!Holds(s)) continue;
    absl::StatusOr<std::unique_ptr<TcpLanePsClient>> c =
        TcpLanePsClient::Open(servers_[s], *stamp_, options);
    if (!c.ok()) {
      LOG(INFO) << "pserver " << servers_[s]->address()
                << ": dense values go over gRPC, not the TCP lane ("
                << c.status().message() << ")";
      continue;
    }
    tcp_[s] = *std::move(c);
    // Smaller calls, spread over the connections, so that one is received
    // while another is applied.
    std::vector<BlockPlacement> blocks;
    for (const auto& chunk : chunks_[s]) {
      blocks.insert(blocks.end(), chunk.begin(), chunk.end());
    }
    chunks_[s] = CutChunks(blocks, tcp_lane::kChunkBytes);
    ++n;
  }
  return n;
}

std::function<bool()> ParamClient::LaneRunner() const {
  std::vector<TcpLanePsClient*> lanes;
  for (const std::unique_ptr<TcpLanePsClient>& c : tcp_) {
    if (c != nullptr) lanes.push_back(c.get());
  }
  if (lanes.empty()) return nullptr;
  return [lanes = std::move(lanes)] {
    // Once this thread has a call, the others' deferred calls go to their
    // workers, to be carried at the same time.
    const auto release = [&lanes] {
      for (TcpLanePsClient* c : lanes) c->ReleaseDeferred();
    };
    for (TcpLanePsClient* c : lanes) {
      if (c->RunQueued(release)) return true;
    }
    release();
    return false;
  };
}

bool ParamClient::Holds(size_t s) const {
  for (const auto& chunk : chunks_[s]) {
    if (!chunk.empty()) return true;
  }
  return false;
}

int ParamClient::holding_servers() const {
  int n = 0;
  for (size_t s = 0; s < chunks_.size(); ++s) n += Holds(s);
  return n;
}

int ParamClient::tcp_lane_servers() const {
  int n = 0;
  for (const std::unique_ptr<TcpLanePsClient>& c : tcp_) {
    n += c != nullptr && !c->lost();
  }
  return n;
}

void ParamClient::set_encodings(ValueEncoding push, ValueEncoding pull) {
  push_encoding_ = push;
  pull_encoding_ = pull;
  deltas_.reset();
  if (pull != THRESHOLD) return;
  std::vector<PullDeltaDecoder::BlockSize> blocks;
  for (const auto& server : chunks_) {
    for (const auto& chunk : server) {
      for (const BlockPlacement& b : chunk) {
        blocks.push_back({b.table_id, b.block, b.size});
      }
    }
  }
  deltas_ = std::make_unique<PullDeltaDecoder>(blocks);
}

namespace {

// Takes a compressed pull's reply (TakeDensePull's checks, then each block
// through `deltas`).
absl::Status TakeCompressedPull(absl::string_view from, const PullRequest& req,
                                const PullResponse& resp,
                                const DensePullTargets& targets,
                                PullDeltaDecoder* deltas) {
  RETURN_IF_ERROR(CheckPullBlockCounts(from, req, resp, targets));
  for (int i = 0; i < resp.blocks_size(); ++i) {
    const DenseBlock& got = resp.blocks(i);
    const BlockRef& want = req.blocks(i);
    if (got.table_id() != want.table_id() || got.block() != want.block() ||
        (got.encoding() != THRESHOLD && got.encoding() != FLOAT32)) {
      return MismatchedPullBlock(from, i);
    }
    if (absl::Status s =
            deltas->Take(got.table_id(), got.block(), got.encoding() == FLOAT32,
                         got.delta_epoch(), got.base_version(), got.version(),
                         got.values(), targets[i]);
        !s.ok()) {
      return absl::DataLossError(
          absl::StrCat("pull from ", from, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int ParamClient::shared_servers() const {
  const bool pushes = push_encoding_ == FLOAT32 && threshold_ == nullptr;
  const bool pulls = pull_encoding_ == FLOAT32;
  int n = 0;
  for (const std::unique_ptr<SharedMemoryPsClient>& c : shared_) {
    n += c != nullptr && ((pushes && c->pushes()) || (pulls && c->pulls()));
  }
  return n;
}

int ParamClient::UseSharedMemory(bool calls) {
  shared_.clear();
  shared_.resize(servers_.size());
  // Pushes through the region only when they are float32 (threshold and
  // half-precision pushes stay on TCP), pulls only when they are.
  const bool pushes = push_encoding_ == FLOAT32 && threshold_ == nullptr;
  const bool pulls = pull_encoding_ == FLOAT32;
  if (!pushes && !pulls) return 0;  // nothing would go through a region
  int n = 0;
  for (size_t s = 0; s < servers_.size(); ++s) {
    SharedMemoryPsClient::Options o;
    o.calls = calls;
    for (const auto& chunk : chunks_[s]) {
      for (const BlockPlacement& b : chunk) {
        const SharedMemoryPsClient::Block block{b.table_id, b.block, b.size};
        if (pushes) o.pushes.push_back(block);
        if (pulls) o.pulls.push_back(block);
      }
    }
    absl::StatusOr<std::unique_ptr<SharedMemoryPsClient>> c =
        SharedMemoryPsClient::Open(servers_[s], stamp_, o);
    if (!c.ok()) {
      LOG(INFO) << "pserver " << servers_[s]->address()
                << ": dense values go over TCP, not shared memory ("
                << c.status().message() << ")";
      continue;
    }
    shared_[s] = *std::move(c);
    ++n;
  }
  return n;
}

absl::Status ParamClient::Pull(int64_t min_version, int64_t step,
                               const std::vector<float*>& values,
                               TransferStats* stats, int64_t min_clock) {
  const DeferLaneCalls waited_at_once(tcp_);
  return StartPull(min_version, step, values, min_clock)->Wait(stats);
}

struct ParamClient::PullCall {
  std::vector<BlockPlacement> chunk;  // of the tables asked for
  PsClientInterface* server;
  DensePullTargets targets;  // where each block's values go
  PullRequest req;
  PullResponse resp;
};

std::unique_ptr<Transfer> ParamClient::StartPull(
    int64_t min_version, int64_t step, const std::vector<float*>& values,
    int64_t min_clock, int64_t own_clock, const std::vector<bool>* only) {
  auto calls = std::make_shared<std::vector<std::unique_ptr<PullCall>>>();
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (size_t c = 0; c < chunks_[s].size(); ++c) {
      std::unique_ptr<PullCall> p = MakePullCall(s, c, values, only);
      if (p == nullptr) continue;
      p->req.set_min_version(min_version);
      p->req.set_step(step);
      p->req.set_min_clock(min_clock);
      p->req.set_own_clock(own_clock);
      calls->push_back(std::move(p));
    }
  }
  std::unique_ptr<Transfer> t =
      Transfer::Of(calls, [](const PullCall& p, TransferStats* stats) {
        stats->bytes += static_cast<int64_t>(p.resp.ByteSizeLong());
        for (int j = 0; j < p.resp.blocks_size(); ++j) {
          const DenseBlock& b = p.resp.blocks(j);
          // Values its transport moved outside the reply (shared memory;
          // an empty THRESHOLD block is a pull with no change).
          if (b.values().empty() && b.encoding() != THRESHOLD &&
              j < static_cast<int>(p.chunk.size())) {
            stats->bytes +=
                p.chunk[j].size * static_cast<int64_t>(sizeof(float));
          }
          stats->min_version = stats->min_version < 0
                                   ? b.version()
                                   : std::min(stats->min_version, b.version());
        }
        stats->server_wait_us =
            std::max(stats->server_wait_us, p.resp.wait_micros());
      });
  t->run_queued_ = LaneRunner();
  for (const auto& p : *calls) {
    if (deltas_ == nullptr) {
      p->server->PullDenseAsync(p->req, &p->targets, &p->resp, t->OneDone());
      continue;
    }
    PullCall* call = p.get();
    p->server->PullAsync(
        p->req, &p->resp,
        [call, deltas = deltas_.get(), done = t->OneDone()](absl::Status s) {
          if (s.ok()) {
            s = TakeCompressedPull(call->server->address(), call->req,
                                   call->resp, call->targets, deltas);
          }
          done(std::move(s));
        });
  }
  return t;
}

std::unique_ptr<ParamClient::PullCall> ParamClient::MakePullCall(
    size_t s, size_t c, const std::vector<float*>& values,
    const std::vector<bool>* only) const {
  auto p = std::make_unique<PullCall>();
  for (const BlockPlacement& b : chunks_[s][c]) {
    if (only != nullptr && !(*only)[b.table_id]) continue;
    p->chunk.push_back(b);
    p->targets.push_back(absl::MakeSpan(values[b.table_id] + b.offset,
                                        static_cast<size_t>(b.size)));
  }
  if (p->chunk.empty()) return nullptr;
  p->server = Dense(s);
  stamp_->Stamp(&p->req);
  p->req.set_encoding(pull_encoding_);
  for (const BlockPlacement& b : p->chunk) {
    BlockRef* r = p->req.add_blocks();
    r->set_table_id(b.table_id);
    r->set_block(b.block);
    if (deltas_ != nullptr) {
      const PullDeltaDecoder::Held h = deltas_->held(b.table_id, b.block);
      r->set_held_epoch(h.epoch);
      r->set_held_version(h.version);
    }
  }
  return p;
}

absl::Status ParamClient::Push(int64_t step,
                               const std::vector<const float*>& grads,
                               TransferStats* stats) {
  const DeferLaneCalls waited_at_once(tcp_);
  ASSIGN_OR_RETURN(std::unique_ptr<Transfer> t, StartPush(step, grads));
  return t->Wait(stats);
}

// Float32 values go from the gradients as they are (the transport may send
// them without copying); other encodings into buffers of their own.
struct ParamClient::PushCall {
  PsClientInterface* server;
  DensePush push;
  std::vector<std::string> encoded;
  PushResponse resp;
};

absl::StatusOr<std::unique_ptr<Transfer>> ParamClient::StartPush(
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
  std::unique_ptr<Transfer> t =
      Transfer::Of(calls, [](const PushCall& p, TransferStats* stats) {
        // The push as a message with its values, whichever way the
        // transport moved them (through a region: a few bytes of offsets
        // more or less than this).
        stats->bytes += static_cast<int64_t>(DensePushByteSize(p.push));
      });
  t->run_queued_ = LaneRunner();
  for (const auto& p : *calls) {
    p->server->PushDenseAsync(p->push, &p->resp, t->OneDone());
  }
  return t;
}

absl::Status ParamClient::FillPushCall(size_t s, size_t c, int64_t step,
                                       const std::vector<const float*>& grads,
                                       const std::vector<bool>* only,
                                       PushCall* p) {
  const std::vector<BlockPlacement>& chunk = chunks_[s][c];
  p->server = Dense(s);
  stamp_->Stamp(&p->push.header);
  p->push.header.set_step(step);
  p->push.header.set_request_id(stamp_->NextRequestId());
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
    p->push.blocks.push_back(ref);
  }
  return absl::OkStatus();
}

absl::Status ParamClient::ExchangeTableNorms(int64_t step,
                                             const std::vector<bool>& lars) {
  return TableNormExchange(servers_, chunks_, stamp_).Exchange(step, lars);
}

}  // namespace shardps
