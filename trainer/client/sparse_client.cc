#include "trainer/client/sparse_client.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/transport/wire_limits.h"
#include "trainer/client/placement.h"

namespace shardps {

SparseClient::SparseClient(std::vector<PsClientInterface*> servers,
                           RequestStamp* stamp)
    : servers_(std::move(servers)), stamp_(stamp) {}

absl::Status SparseClient::Pull(int64_t min_version, int64_t step,
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
    auto chunks = SplitKeys(t.keys, t.dim, num_servers, kMaxChunkBytes,
                            /*every_server=*/false);
    for (int s = 0; s < num_servers; ++s) {
      for (auto& chunk : chunks[s]) {
        auto p = std::make_unique<Pending>();
        p->table = &t;
        p->positions = std::move(chunk);
        p->server = servers_[s];
        stamp_->Stamp(&p->req);
        p->req.set_min_version(min_version);
        p->req.set_step(step);
        SparseRows* r = p->req.add_sparse();
        r->set_table_id(t.table_id);
        r->set_shard(s);  // servers_[s] holds shard s (or routes to it)
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
  absl::Status st = OnEveryServer(calls.size(), [&](size_t i, auto done) {
    Pending* p = calls[i].get();
    p->server->PullAsync(p->req, &p->resp, [p, done](absl::Status s) {
      const size_t row_bytes = sizeof(float) * p->table->dim;
      if (s.ok() &&
          (p->resp.sparse_size() != 1 || p->resp.sparse(0).values().size() !=
                                             p->positions.size() * row_bytes)) {
        s = absl::DataLossError(
            absl::StrCat("sparse pull from ", p->server->address(),
                         ": the reply does not match the request"));
      }
      if (s.ok()) {
        const char* src = p->resp.sparse(0).values().data();
        for (size_t j = 0; j < p->positions.size(); ++j) {
          std::memcpy(p->table->rows +
                          static_cast<size_t>(p->positions[j]) * p->table->dim,
                      src + j * row_bytes, row_bytes);
        }
      }
      done(s);
    });
  });
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
  return st;
}

absl::Status SparseClient::Push(int64_t step, bool sync,
                                const std::vector<SparseTransfer>& tables,
                                TransferStats* stats) {
  const int num_servers = static_cast<int>(servers_.size());
  std::vector<std::unique_ptr<PendingPush>> calls;
  for (const SparseTransfer& t : tables) {
    const auto chunks =
        SplitKeys(t.keys, t.dim, num_servers, kMaxChunkBytes, sync);
    for (int s = 0; s < num_servers; ++s) {
      for (const auto& chunk : chunks[s]) {
        auto p = std::make_unique<PendingPush>();
        p->server = servers_[s];
        stamp_->Stamp(&p->req);
        p->req.set_step(step);
        p->req.set_request_id(stamp_->NextRequestId());
        SparseRows* r = p->req.add_sparse();
        r->set_table_id(t.table_id);
        r->set_shard(s);
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
