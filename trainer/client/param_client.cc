#include "trainer/client/param_client.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "common/shard_map.h"
#include "common/wire_limits.h"
#include "compression/threshold_codec.h"
#include "compression/value_encoding.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace shardps {
namespace {

// Collects the first error of parallel calls.
class FirstError {
 public:
  void Add(const absl::Status& s) {
    if (s.ok()) return;
    absl::MutexLock l(&mu_);
    if (status_.ok()) status_ = s;
  }
  absl::Status Get() {
    absl::MutexLock l(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// One push call in flight: its pserver, request and reply.
struct PendingPush {
  PsClientInterface* server = nullptr;
  PushRequest req;
  PushResponse resp;
};

// Sends every push at once, waits for all, returns the first error and
// (if `stats`) the bytes of the requests.
absl::Status SendPushes(const std::vector<std::unique_ptr<PendingPush>>& calls,
                        TransferStats* stats) {
  FirstError err;
  absl::BlockingCounter pending(static_cast<int>(calls.size()));
  for (const auto& call : calls) {
    call->server->PushAsync(call->req, &call->resp, [&](absl::Status st) {
      err.Add(st);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  if (stats != nullptr) {
    *stats = TransferStats{};
    for (const auto& p : calls) {
      stats->bytes += static_cast<int64_t>(p->req.ByteSizeLong());
    }
    stats->rpcs = static_cast<int64_t>(calls.size());
  }
  return err.Get();
}

}  // namespace

std::vector<std::vector<std::vector<BlockPlacement>>> PlanChunks(
    const std::vector<DenseTableLayout>& tables, int num_servers,
    size_t max_chunk_bytes) {
  std::vector<std::vector<BlockPlacement>> per_server(num_servers);
  for (size_t t = 0; t < tables.size(); ++t) {
    const DenseTableLayout& layout = tables[t];
    const uint64_t hash = TableHash(layout.name);
    const int64_t nb = NumBlocks(layout.num_values, layout.block_size);
    for (int64_t b = 0; b < nb; ++b) {
      BlockPlacement p;
      p.table_id = static_cast<uint32_t>(t);
      p.block = static_cast<uint32_t>(b);
      p.offset = b * layout.block_size;
      p.size = std::min(layout.block_size, layout.num_values - p.offset);
      per_server[DenseBlockServer(hash, b, num_servers)].push_back(p);
    }
  }
  std::vector<std::vector<std::vector<BlockPlacement>>> chunks(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    size_t bytes = 0;
    for (const BlockPlacement& p : per_server[s]) {
      const size_t b = static_cast<size_t>(p.size) * sizeof(float);
      if (chunks[s].empty() || bytes + b > max_chunk_bytes) {
        chunks[s].emplace_back();
        bytes = 0;
      }
      chunks[s].back().push_back(p);
      bytes += b;
    }
  }
  return chunks;
}

ParamClient::ParamClient(std::vector<PsClientInterface*> servers,
                         int trainer_id, std::vector<DenseTableLayout> tables)
    : servers_(std::move(servers)),
      trainer_id_(trainer_id),
      tables_(std::move(tables)),
      chunks_(PlanChunks(tables_, static_cast<int>(servers_.size()),
                         kMaxChunkBytes)),
      id_rng_(std::random_device{}() ^
              (static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) << 8) ^
              static_cast<uint64_t>(trainer_id)) {}

absl::Status ParamClient::EncodeThreshold(const BlockPlacement& b,
                                          absl::Span<const float> grad,
                                          std::string* out) {
  auto& compressor = compressors_[{b.table_id, b.block}];
  if (compressor == nullptr) {
    std::unique_ptr<ThresholdAlgorithm> algorithm;
    if (threshold_.adaptive) {
      AdaptiveThreshold::Options o;
      o.initial_threshold = threshold_.threshold;
      o.min_sparsity_target = threshold_.min_sparsity;
      o.max_sparsity_target = threshold_.max_sparsity;
      ASSIGN_OR_RETURN(algorithm, AdaptiveThreshold::Create(o));
    } else {
      ASSIGN_OR_RETURN(algorithm, FixedThreshold::Create(threshold_.threshold));
    }
    GradientCompressor::Options o;
    o.clip = threshold_.clip;
    o.shake_frequency = threshold_.shake_frequency;
    o.use_residual = threshold_.use_residual;
    ASSIGN_OR_RETURN(compressor, GradientCompressor::Create(
                                     grad.size(), std::move(algorithm), o));
  }
  CompressionStats& st = compression_stats_;
  st.threshold_sum += compressor->threshold();
  ++st.threshold_count;
  message_.clear();
  ASSIGN_OR_RETURN(EncodeInfo info, compressor->Step(grad, &message_));
  out->clear();
  st.elements += static_cast<int64_t>(grad.size());
  if (sent_masks_.size() <= b.table_id) sent_masks_.resize(tables_.size());
  if (sent_masks_[b.table_id].empty()) {
    sent_masks_[b.table_id].assign(tables_[b.table_id].num_values, 0);
  }
  std::fill(sent_masks_[b.table_id].begin() + b.offset,
            sent_masks_[b.table_id].begin() + b.offset + b.size, 0);
  switch (info.kind) {
    case EncodeInfo::Kind::kEmpty:
      ++st.empty_messages;  // empty bytes: a zero gradient
      return absl::OkStatus();
    case EncodeInfo::Kind::kNonFinite:
      // Nothing sent and the residual kept: the block pushes a zero
      // gradient this step (a sync step still needs every block).
      ++st.nonfinite_messages;
      return absl::OkStatus();
    case EncodeInfo::Kind::kThreshold:
      ++st.threshold_messages;
      break;
    case EncodeInfo::Kind::kBitmap:
      ++st.bitmap_messages;
      break;
  }
  st.selected += info.selected;
  AppendMessageBytes(message_, out);
  // Mark what this message changes (for momentum masking).
  decoded_.assign(grad.size(), 0.0f);
  RETURN_IF_ERROR(DecodeAdd(message_, absl::MakeSpan(decoded_)));
  if (sent_masks_.size() <= b.table_id) sent_masks_.resize(tables_.size());
  std::vector<uint8_t>& mask = sent_masks_[b.table_id];
  if (mask.empty()) mask.assign(tables_[b.table_id].num_values, 0);
  for (size_t i = 0; i < decoded_.size(); ++i) {
    mask[b.offset + i] = decoded_[i] != 0.0f;
  }
  return absl::OkStatus();
}

ParamClient::CompressionStats ParamClient::TakeCompressionStats() {
  CompressionStats out = compression_stats_;
  compression_stats_ = CompressionStats{};
  return out;
}

uint64_t ParamClient::NextRequestId() {
  uint64_t id = 0;
  while (id == 0) id = id_rng_();
  return id;
}

absl::Status ParamClient::Register(uint64_t incarnation) {
  FirstError err;
  absl::BlockingCounter pending(static_cast<int>(servers_.size()));
  std::vector<RegisterRequest> reqs(servers_.size());
  std::vector<RegisterResponse> resps(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    reqs[s].set_trainer_id(trainer_id_);
    reqs[s].set_incarnation(incarnation);
    servers_[s]->RegisterAsync(reqs[s], &resps[s], [&](absl::Status st) {
      err.Add(st);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return err.Get();
}

namespace {

// Runs `call(s, done)` on every server at once and waits for all.
template <typename Fn>
absl::Status OnEveryServer(size_t n, Fn call) {
  FirstError err;
  absl::BlockingCounter pending(static_cast<int>(n));
  for (size_t s = 0; s < n; ++s) {
    call(s, [&](absl::Status st) {
      err.Add(st);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  return err.Get();
}

}  // namespace

absl::StatusOr<int64_t> ParamClient::Join(uint64_t incarnation) {
  std::vector<RegisterRequest> reqs(servers_.size());
  std::vector<RegisterResponse> resps(servers_.size());
  RETURN_IF_ERROR(OnEveryServer(servers_.size(), [&](size_t s, auto done) {
    reqs[s].set_trainer_id(trainer_id_);
    reqs[s].set_incarnation(incarnation);
    servers_[s]->RegisterAsync(reqs[s], &resps[s], std::move(done));
  }));
  int64_t start = 0;
  for (const RegisterResponse& r : resps)
    start = std::max(start, r.join_step());
  RETURN_IF_ERROR(OnEveryServer(servers_.size(), [&](size_t s, auto done) {
    reqs[s].set_start_step(start);
    reqs[s].set_confirm(true);
    servers_[s]->RegisterAsync(reqs[s], &resps[s], std::move(done));
  }));
  return start;
}

absl::Status ParamClient::Leave(uint64_t incarnation) {
  std::vector<LeaveRequest> reqs(servers_.size());
  std::vector<LeaveResponse> resps(servers_.size());
  return OnEveryServer(servers_.size(), [&](size_t s, auto done) {
    reqs[s].set_trainer_id(trainer_id_);
    reqs[s].set_incarnation(incarnation);
    servers_[s]->LeaveAsync(reqs[s], &resps[s], std::move(done));
  });
}

absl::Status ParamClient::Checkpoint(int64_t step) {
  std::vector<CheckpointRequest> reqs(servers_.size());
  std::vector<CheckpointResponse> resps(servers_.size());
  return OnEveryServer(servers_.size(), [&](size_t s, auto done) {
    reqs[s].set_trainer_id(trainer_id_);
    reqs[s].set_step(step);
    reqs[s].set_generation(generation_);
    servers_[s]->CheckpointAsync(reqs[s], &resps[s], std::move(done));
  });
}

absl::StatusOr<std::vector<GetStatusResponse>> ParamClient::Statuses() {
  std::vector<GetStatusRequest> reqs(servers_.size());
  std::vector<GetStatusResponse> resps(servers_.size());
  RETURN_IF_ERROR(OnEveryServer(servers_.size(), [&](size_t s, auto done) {
    servers_[s]->GetStatusAsync(reqs[s], &resps[s], std::move(done));
  }));
  return resps;
}

absl::Status ParamClient::Rollback(int64_t step, uint64_t generation) {
  std::vector<RollbackRequest> reqs(servers_.size());
  std::vector<RollbackResponse> resps(servers_.size());
  return OnEveryServer(servers_.size(), [&](size_t s, auto done) {
    reqs[s].set_trainer_id(trainer_id_);
    reqs[s].set_step(step);
    reqs[s].set_generation(generation);
    servers_[s]->RollbackAsync(reqs[s], &resps[s], std::move(done));
  });
}

void ParamClient::ResetCompression() {
  compressors_.clear();
  for (auto& m : sent_masks_) std::fill(m.begin(), m.end(), 0);
}

absl::Status ParamClient::MarkDone(int64_t steps) {
  std::vector<std::unique_ptr<PendingPush>> calls;
  for (PsClientInterface* server : servers_) {
    auto p = std::make_unique<PendingPush>();
    p->server = server;
    p->req.set_trainer_id(trainer_id_);
    p->req.set_generation(generation_);
    p->req.set_incarnation(incarnation_);
    p->req.set_step(steps);
    p->req.set_request_id(NextRequestId());
    calls.push_back(std::move(p));
  }
  return SendPushes(calls, nullptr);
}

absl::Status ParamClient::InitJob(
    const JobSpec& job, const std::vector<const float*>& initial_values) {
  for (size_t s = 0; s < servers_.size(); ++s) {
    PsClientInterface* server = servers_[s];
    InitJobRequest req;
    req.set_trainer_id(trainer_id_);
    *req.mutable_job() = job;
    for (const auto& chunk : chunks_[s]) {
      for (const BlockPlacement& p : chunk) {
        BlockRef* r = req.add_blocks();
        r->set_table_id(p.table_id);
        r->set_block(p.block);
      }
    }
    InitJobResponse resp;
    absl::Status st = server->InitJob(req, &resp);
    if (!st.ok()) return st;
    if (resp.already_ready()) {
      LOG(INFO) << "pserver " << server->address()
                << " already holds this job; keeping its values";
      continue;
    }
    for (const auto& chunk : chunks_[s]) {
      SetInitialValuesRequest vreq;
      vreq.set_trainer_id(trainer_id_);
      for (const BlockPlacement& p : chunk) {
        DenseBlock* b = vreq.add_blocks();
        b->set_table_id(p.table_id);
        b->set_block(p.block);
        b->set_values(reinterpret_cast<const char*>(initial_values[p.table_id] +
                                                    p.offset),
                      p.size * sizeof(float));
      }
      SetInitialValuesResponse vresp;
      st = server->SetInitialValues(vreq, &vresp);
      if (!st.ok()) return st;
    }
    CommitInitRequest creq;
    creq.set_trainer_id(trainer_id_);
    CommitInitResponse cresp;
    st = server->CommitInit(creq, &cresp);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status ParamClient::WaitUntilReady(const JobSpec& expected,
                                         absl::Duration timeout) {
  const absl::Time start = absl::Now();
  absl::Time last_log = start;
  std::vector<bool> ready(servers_.size(), false);
  while (true) {
    std::vector<std::string> waiting;
    for (size_t s = 0; s < servers_.size(); ++s) {
      if (ready[s]) continue;
      GetStatusRequest req;
      GetStatusResponse resp;
      absl::Status st = servers_[s]->GetStatus(req, &resp);
      if (!st.ok()) return st;
      if (!resp.job_ready()) {
        waiting.push_back(servers_[s]->address());
        continue;
      }
      if (!google::protobuf::util::MessageDifferencer::Equals(resp.job(),
                                                              expected)) {
        std::string diff;
        google::protobuf::util::MessageDifferencer d;
        d.ReportDifferencesToString(&diff);
        d.Compare(expected, resp.job());
        return absl::FailedPreconditionError(absl::StrCat(
            "pserver ", servers_[s]->address(),
            " holds a job that differs from this trainer's config (the "
            "chief's config, mode, trainer count or batch size differ): ",
            diff.substr(0, 400)));
      }
      ready[s] = true;
    }
    if (waiting.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now - start > timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("the chief (trainer 0) has not initialised pserver(s) ",
                       absl::StrJoin(waiting, ", "), " after ",
                       absl::FormatDuration(now - start)));
    }
    if (now - last_log >= absl::Seconds(10)) {
      last_log = now;
      LOG(INFO) << "waiting for the chief (trainer 0) to initialise pserver(s) "
                << absl::StrJoin(waiting, ", ");
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::Status ParamClient::Pull(int64_t min_version, int64_t step,
                               const std::vector<float*>& values,
                               TransferStats* stats, int64_t min_clock) {
  struct Pending {
    const std::vector<BlockPlacement>* chunk;
    PsClientInterface* server;
    PullRequest req;
    PullResponse resp;
  };
  std::vector<std::unique_ptr<Pending>> calls;
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (const auto& chunk : chunks_[s]) {
      auto p = std::make_unique<Pending>();
      p->chunk = &chunk;
      p->server = servers_[s];
      p->req.set_trainer_id(trainer_id_);
      p->req.set_generation(generation_);
      p->req.set_incarnation(incarnation_);
      p->req.set_min_version(min_version);
      p->req.set_step(step);
      p->req.set_min_clock(min_clock);
      p->req.set_encoding(pull_encoding_);
      for (const BlockPlacement& b : chunk) {
        BlockRef* r = p->req.add_blocks();
        r->set_table_id(b.table_id);
        r->set_block(b.block);
      }
      calls.push_back(std::move(p));
    }
  }
  FirstError err;
  absl::BlockingCounter pending(static_cast<int>(calls.size()));
  for (size_t i = 0; i < calls.size(); ++i) {
    Pending* p = calls[i].get();
    PsClientInterface* srv = p->server;
    srv->PullAsync(p->req, &p->resp, [&, p, srv](absl::Status st) {
      if (st.ok()) {
        // Check the reply against the request, then copy it out.
        if (p->resp.blocks_size() != static_cast<int>(p->chunk->size())) {
          st = absl::DataLossError(absl::StrCat(
              "pull from ", srv->address(), ": asked for ", p->chunk->size(),
              " blocks, got ", p->resp.blocks_size()));
        }
        for (int j = 0; st.ok() && j < p->resp.blocks_size(); ++j) {
          const DenseBlock& got = p->resp.blocks(j);
          const BlockPlacement& want = (*p->chunk)[j];
          if (got.table_id() != want.table_id || got.block() != want.block ||
              got.encoding() != pull_encoding_ ||
              !DecodeValues(got.values(), got.encoding(),
                            absl::MakeSpan(values[want.table_id] + want.offset,
                                           want.size))
                   .ok()) {
            st = absl::DataLossError(
                absl::StrCat("pull from ", srv->address(), ": block ", j,
                             " of the reply does not match the request"));
            break;
          }
        }
      }
      err.Add(st);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  if (stats != nullptr) {
    *stats = TransferStats{};
    for (const auto& p : calls) {
      stats->bytes += static_cast<int64_t>(p->resp.ByteSizeLong());
      stats->server_wait_us =
          std::max(stats->server_wait_us, p->resp.wait_micros());
      for (const DenseBlock& b : p->resp.blocks()) {
        stats->min_version = stats->min_version < 0
                                 ? b.version()
                                 : std::min(stats->min_version, b.version());
      }
    }
    stats->rpcs = static_cast<int64_t>(calls.size());
  }
  return err.Get();
}

absl::Status ParamClient::Push(int64_t step,
                               const std::vector<const float*>& grads,
                               TransferStats* stats) {
  std::vector<std::unique_ptr<PendingPush>> calls;
  for (size_t s = 0; s < servers_.size(); ++s) {
    for (const auto& chunk : chunks_[s]) {
      auto p = std::make_unique<PendingPush>();
      p->server = servers_[s];
      p->req.set_trainer_id(trainer_id_);
      p->req.set_generation(generation_);
      p->req.set_incarnation(incarnation_);
      p->req.set_step(step);
      p->req.set_request_id(NextRequestId());
      for (const BlockPlacement& b : chunk) {
        DenseBlock* d = p->req.add_blocks();
        d->set_table_id(b.table_id);
        d->set_block(b.block);
        const absl::Span<const float> g(grads[b.table_id] + b.offset, b.size);
        if (use_threshold_) {
          d->set_encoding(THRESHOLD);
          RETURN_IF_ERROR(EncodeThreshold(b, g, d->mutable_values()));
        } else {
          d->set_encoding(push_encoding_);
          EncodeValues(g, push_encoding_, d->mutable_values());
        }
      }
      calls.push_back(std::move(p));
    }
  }
  return SendPushes(calls, stats);
}

namespace {

// Positions (into a transfer's keys) per pserver, cut into chunks of at
// most kMaxChunkBytes of keys and values. In `sync` mode every pserver gets
// at least one chunk, possibly empty.
std::vector<std::vector<std::vector<uint32_t>>> SplitKeys(
    absl::Span<const uint64_t> keys, int dim, int num_servers, bool sync) {
  std::vector<std::vector<uint32_t>> per_server(num_servers);
  for (size_t i = 0; i < keys.size(); ++i) {
    per_server[SparseKeyServer(keys[i], num_servers)].push_back(
        static_cast<uint32_t>(i));
  }
  const size_t per_key = sizeof(uint64_t) + sizeof(float) * dim;
  const size_t max_keys = std::max<size_t>(1, kMaxChunkBytes / per_key);
  std::vector<std::vector<std::vector<uint32_t>>> chunks(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    const auto& idx = per_server[s];
    for (size_t start = 0; start < idx.size(); start += max_keys) {
      chunks[s].emplace_back(
          idx.begin() + start,
          idx.begin() + std::min(idx.size(), start + max_keys));
    }
    if (sync && chunks[s].empty()) chunks[s].emplace_back();
  }
  return chunks;
}

}  // namespace

absl::Status ParamClient::PullSparse(int64_t min_version, int64_t step,
                                     const std::vector<SparseTransfer>& tables,
                                     TransferStats* stats) {
  struct Pending {
    const SparseTransfer* table;
    std::vector<uint32_t> positions;
    PsClientInterface* server;
    PullRequest req;
    PullResponse resp;
  };
  const int num_servers = static_cast<int>(servers_.size());
  std::vector<std::unique_ptr<Pending>> calls;
  for (const SparseTransfer& t : tables) {
    auto chunks = SplitKeys(t.keys, t.dim, num_servers, /*sync=*/false);
    for (int s = 0; s < num_servers; ++s) {
      for (auto& chunk : chunks[s]) {
        auto p = std::make_unique<Pending>();
        p->table = &t;
        p->positions = std::move(chunk);
        p->server = servers_[s];
        p->req.set_trainer_id(trainer_id_);
        p->req.set_generation(generation_);
        p->req.set_incarnation(incarnation_);
        p->req.set_min_version(min_version);
        p->req.set_step(step);
        SparseRows* r = p->req.add_sparse();
        r->set_table_id(t.table_id);
        std::string* keys = r->mutable_keys();
        keys->resize(p->positions.size() * sizeof(uint64_t));
        uint64_t* k = reinterpret_cast<uint64_t*>(keys->data());
        for (size_t j = 0; j < p->positions.size(); ++j) {
          k[j] = t.keys[p->positions[j]];
        }
        calls.push_back(std::move(p));
      }
    }
  }
  FirstError err;
  absl::BlockingCounter pending(static_cast<int>(calls.size()));
  for (auto& call : calls) {
    Pending* p = call.get();
    p->server->PullAsync(p->req, &p->resp, [&, p](absl::Status st) {
      const size_t row_bytes = sizeof(float) * p->table->dim;
      if (st.ok() &&
          (p->resp.sparse_size() != 1 || p->resp.sparse(0).values().size() !=
                                             p->positions.size() * row_bytes)) {
        st = absl::DataLossError(
            absl::StrCat("sparse pull from ", p->server->address(),
                         ": the reply does not match the request"));
      }
      if (st.ok()) {
        const char* src = p->resp.sparse(0).values().data();
        for (size_t j = 0; j < p->positions.size(); ++j) {
          std::memcpy(p->table->rows +
                          static_cast<size_t>(p->positions[j]) * p->table->dim,
                      src + j * row_bytes, row_bytes);
        }
      }
      err.Add(st);
      pending.DecrementCount();
    });
  }
  pending.Wait();
  if (stats != nullptr) {
    *stats = TransferStats{};
    for (const auto& p : calls) {
      stats->bytes +=
          static_cast<int64_t>(p->req.ByteSizeLong() + p->resp.ByteSizeLong());
      stats->server_wait_us =
          std::max(stats->server_wait_us, p->resp.wait_micros());
    }
    stats->rpcs = static_cast<int64_t>(calls.size());
  }
  return err.Get();
}

absl::Status ParamClient::PushSparse(int64_t step, bool sync,
                                     const std::vector<SparseTransfer>& tables,
                                     TransferStats* stats) {
  const int num_servers = static_cast<int>(servers_.size());
  std::vector<std::unique_ptr<PendingPush>> calls;
  for (const SparseTransfer& t : tables) {
    const auto chunks = SplitKeys(t.keys, t.dim, num_servers, sync);
    for (int s = 0; s < num_servers; ++s) {
      for (const auto& chunk : chunks[s]) {
        auto p = std::make_unique<PendingPush>();
        p->server = servers_[s];
        p->req.set_trainer_id(trainer_id_);
        p->req.set_generation(generation_);
        p->req.set_incarnation(incarnation_);
        p->req.set_step(step);
        p->req.set_request_id(NextRequestId());
        SparseRows* r = p->req.add_sparse();
        r->set_table_id(t.table_id);
        r->set_num_chunks(static_cast<int32_t>(chunks[s].size()));
        std::string* keys = r->mutable_keys();
        std::string* values = r->mutable_values();
        keys->resize(chunk.size() * sizeof(uint64_t));
        values->resize(chunk.size() * sizeof(float) * t.dim);
        uint64_t* k = reinterpret_cast<uint64_t*>(keys->data());
        char* v = values->data();
        const size_t row_bytes = sizeof(float) * t.dim;
        for (size_t j = 0; j < chunk.size(); ++j) {
          k[j] = t.keys[chunk[j]];
          std::memcpy(v + j * row_bytes,
                      t.grads + static_cast<size_t>(chunk[j]) * t.dim,
                      row_bytes);
        }
        calls.push_back(std::move(p));
      }
    }
  }
  return SendPushes(calls, stats);
}

}  // namespace shardps
