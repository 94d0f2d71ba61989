#include "trainer/client/param_client.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/wire_limits.h"
#include "compression/value_encoding.h"

namespace shardps {

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

absl::Status ParamClient::TakePulled(const std::vector<BlockPlacement>& chunk,
                                     const PsClientInterface& server,
                                     const PullResponse& resp,
                                     const std::vector<float*>& values) const {
  if (resp.blocks_size() != static_cast<int>(chunk.size())) {
    return absl::DataLossError(
        absl::StrCat("pull from ", server.address(), ": asked for ",
                     chunk.size(), " blocks, got ", resp.blocks_size()));
  }
  for (int j = 0; j < resp.blocks_size(); ++j) {
    const DenseBlock& got = resp.blocks(j);
    const BlockPlacement& want = chunk[j];
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

absl::Status ParamClient::Pull(int64_t min_version, int64_t step,
                               const std::vector<float*>& values,
                               TransferStats* stats, int64_t min_clock) {
  return StartPull(min_version, step, values, min_clock)->Wait(stats);
}

std::unique_ptr<DenseTransfer> ParamClient::StartPull(
    int64_t min_version, int64_t step, const std::vector<float*>& values,
    int64_t min_clock) {
  struct Pending {
    const std::vector<BlockPlacement>* chunk;
    PsClientInterface* server;
    PullRequest req;
    PullResponse resp;
  };
  auto calls = std::make_shared<std::vector<std::unique_ptr<Pending>>>();
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (const auto& chunk : chunks_[s]) {
      auto p = std::make_unique<Pending>();
      p->chunk = &chunk;
      p->server = servers_[s];
      stamp_->Stamp(&p->req);
      p->req.set_min_version(min_version);
      p->req.set_step(step);
      p->req.set_min_clock(min_clock);
      p->req.set_encoding(pull_encoding_);
      for (const BlockPlacement& b : chunk) {
        BlockRef* r = p->req.add_blocks();
        r->set_table_id(b.table_id);
        r->set_block(b.block);
      }
      calls->push_back(std::move(p));
    }
  }
  std::unique_ptr<DenseTransfer> t(
      new DenseTransfer(static_cast<int>(calls->size())));
  t->calls_ = calls;
  t->stats_ = [calls] {
    TransferStats stats;
    for (const auto& p : *calls) {
      stats.bytes += static_cast<int64_t>(p->resp.ByteSizeLong());
      stats.server_wait_us =
          std::max(stats.server_wait_us, p->resp.wait_micros());
      for (const DenseBlock& b : p->resp.blocks()) {
        stats.min_version = stats.min_version < 0
                                ? b.version()
                                : std::min(stats.min_version, b.version());
      }
    }
    stats.rpcs = static_cast<int64_t>(calls->size());
    return stats;
  };
  for (const auto& call : *calls) {
    Pending* p = call.get();
    StatusCallback done = t->OneDone();
    p->server->PullAsync(
        p->req, &p->resp, [this, p, values, done](absl::Status s) {
          if (s.ok()) {
            s = TakePulled(*p->chunk, *p->server, p->resp, values);
          }
          done(s);
        });
  }
  return t;
}

absl::Status ParamClient::Push(int64_t step,
                               const std::vector<const float*>& grads,
                               TransferStats* stats) {
  ASSIGN_OR_RETURN(std::unique_ptr<DenseTransfer> t, StartPush(step, grads));
  return t->Wait(stats);
}

absl::StatusOr<std::unique_ptr<DenseTransfer>> ParamClient::StartPush(
    int64_t step, const std::vector<const float*>& grads) {
  // Float32 values go from `grads` as they are (the transport may send them
  // without copying); other encodings into buffers of their own.
  struct Pending {
    PsClientInterface* server;
    DensePush push;
    std::vector<std::string> encoded;
    PushResponse resp;
  };
  auto calls = std::make_shared<std::vector<std::unique_ptr<Pending>>>();
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (const auto& chunk : chunks_[s]) {
      auto p = std::make_unique<Pending>();
      p->server = servers_[s];
      stamp_->Stamp(&p->push.header);
      p->push.header.set_step(step);
      p->push.header.set_request_id(stamp_->NextRequestId());
      const bool copy = threshold_ != nullptr || push_encoding_ != FLOAT32;
      if (copy) p->encoded.resize(chunk.size());
      for (size_t j = 0; j < chunk.size(); ++j) {
        const BlockPlacement& b = chunk[j];
        const absl::Span<const float> g(grads[b.table_id] + b.offset, b.size);
        DenseValuesRef ref{b.table_id, b.block, push_encoding_, {}};
        if (threshold_ != nullptr) {
          ref.encoding = THRESHOLD;
          RETURN_IF_ERROR(threshold_->Encode(b.table_id, b.block, b.offset, g,
                                             &p->encoded[j]));
        } else if (copy) {
          EncodeValues(g, push_encoding_, &p->encoded[j]);
        }
        ref.bytes =
            copy ? absl::string_view(p->encoded[j])
                 : absl::string_view(reinterpret_cast<const char*>(g.data()),
                                     g.size() * sizeof(float));
        p->push.blocks.push_back(ref);
      }
      calls->push_back(std::move(p));
    }
  }
  std::unique_ptr<DenseTransfer> t(
      new DenseTransfer(static_cast<int>(calls->size())));
  t->calls_ = calls;
  t->stats_ = [calls] {
    TransferStats stats;
    for (const auto& p : *calls) {
      stats.bytes += static_cast<int64_t>(DensePushByteSize(p->push));
    }
    stats.rpcs = static_cast<int64_t>(calls->size());
    return stats;
  };
  for (const auto& p : *calls) {
    p->server->PushDenseAsync(p->push, &p->resp, t->OneDone());
  }
  return t;
}

}  // namespace shardps
