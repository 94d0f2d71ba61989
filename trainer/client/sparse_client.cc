#include "trainer/client/sparse_client.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/transport/wire_limits.h"
#include "trainer/client/placement.h"

namespace shardps {
namespace {

// The keys of one table that one call carries: their positions in the
// transfer's keys, and the table's chunk count on that pserver.
struct Part {
  const SparseTransfer* table = nullptr;
  std::vector<uint32_t> positions;
  int num_chunks = 0;
};

// The calls of a transfer, per pserver: every table's keys placed by
// SplitKeys, and its chunks packed into calls of at most kMaxChunkBytes of
// keys and rows, several tables sharing a call (one table's chunk is never
// split further). With `every_server`, every table has at least one part
// (possibly empty) on every pserver.
std::vector<std::vector<std::vector<Part>>> PackCalls(
    const std::vector<SparseTransfer>& tables, int num_servers,
    bool every_server) {
  std::vector<std::vector<std::vector<Part>>> calls(num_servers);
  std::vector<size_t> bytes(num_servers, 0);  // of each pserver's last call
  for (const SparseTransfer& t : tables) {
    auto chunks =
        SplitKeys(t.keys, t.dim, num_servers, kMaxChunkBytes, every_server);
    const size_t row_bytes = sizeof(uint64_t) + sizeof(float) * t.dim;
    for (int s = 0; s < num_servers; ++s) {
      const int n = static_cast<int>(chunks[s].size());
      for (auto& chunk : chunks[s]) {
        const size_t b = chunk.size() * row_bytes;
        if (calls[s].empty() ||
            (!calls[s].back().empty() && bytes[s] + b > kMaxChunkBytes)) {
          calls[s].emplace_back();
          bytes[s] = 0;
        }
        calls[s].back().push_back(Part{&t, std::move(chunk), n});
        bytes[s] += b;
      }
    }
  }
  return calls;
}

std::string* FillKeys(const Part& part, SparseRows* r) {
  std::string* keys = r->mutable_keys();
  keys->resize(part.positions.size() * sizeof(uint64_t));
  uint64_t* k = reinterpret_cast<uint64_t*>(keys->data());
  for (size_t j = 0; j < part.positions.size(); ++j) {
    k[j] = part.table->keys[part.positions[j]];
  }
  return keys;
}

// One pull call: where each part's rows go.
struct PullCall {
  struct Target {
    float* rows;
    int dim;
    std::vector<uint32_t> positions;
  };
  PsClientInterface* server = nullptr;
  std::vector<Target> targets;
  PullRequest req;
  PullResponse resp;
};

// Copies a reply's rows to their places; DATA_LOSS when it does not match
// the request.
absl::Status Unpack(PullCall* p) {
  if (p->resp.sparse_size() != static_cast<int>(p->targets.size())) {
    return absl::DataLossError(absl::StrCat(
        "sparse pull from ", p->server->address(), ": ", p->resp.sparse_size(),
        " tables in the reply to ", p->targets.size(), " asked for"));
  }
  for (size_t i = 0; i < p->targets.size(); ++i) {
    const PullCall::Target& t = p->targets[i];
    const size_t row_bytes = sizeof(float) * t.dim;
    const std::string& values = p->resp.sparse(static_cast<int>(i)).values();
    if (values.size() != t.positions.size() * row_bytes) {
      return absl::DataLossError(
          absl::StrCat("sparse pull from ", p->server->address(),
                       ": the reply does not match the request"));
    }
    for (size_t j = 0; j < t.positions.size(); ++j) {
      std::memcpy(t.rows + static_cast<size_t>(t.positions[j]) * t.dim,
                  values.data() + j * row_bytes, row_bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace

SparseClient::SparseClient(std::vector<PsClientInterface*> servers,
                           RequestStamp* stamp)
    : servers_(std::move(servers)), stamp_(stamp) {}

std::unique_ptr<Transfer> SparseClient::StartPull(
    int64_t min_version, int64_t step,
    const std::vector<SparseTransfer>& tables) {
  const int num_servers = static_cast<int>(servers_.size());
  auto calls = std::make_shared<std::vector<std::unique_ptr<PullCall>>>();
  auto packed = PackCalls(tables, num_servers, /*every_server=*/false);
  for (int s = 0; s < num_servers; ++s) {
    for (std::vector<Part>& parts : packed[s]) {
      auto p = std::make_unique<PullCall>();
      p->server = servers_[s];
      stamp_->Stamp(&p->req);
      p->req.set_min_version(min_version);
      p->req.set_step(step);
      for (Part& part : parts) {
        SparseRows* r = p->req.add_sparse();
        r->set_table_id(part.table->table_id);
        r->set_shard(s);  // servers_[s] holds shard s (or routes to it)
        FillKeys(part, r);
        p->targets.push_back(PullCall::Target{part.table->rows, part.table->dim,
                                              std::move(part.positions)});
      }
      calls->push_back(std::move(p));
    }
  }
  std::unique_ptr<Transfer> t =
      Transfer::Of(calls, [](const PullCall& p, TransferStats* stats) {
        stats->bytes +=
            static_cast<int64_t>(p.req.ByteSizeLong() + p.resp.ByteSizeLong());
        stats->server_wait_us =
            std::max(stats->server_wait_us, p.resp.wait_micros());
      });
  for (const auto& call : *calls) {
    PullCall* p = call.get();
    p->server->PullAsync(p->req, &p->resp,
                         [p, done = t->OneDone()](absl::Status s) {
                           if (s.ok()) s = Unpack(p);
                           done(s);
                         });
  }
  return t;
}

absl::Status SparseClient::Pull(int64_t min_version, int64_t step,
                                const std::vector<SparseTransfer>& tables,
                                TransferStats* stats) {
  return StartPull(min_version, step, tables)->Wait(stats);
}

absl::Status SparseClient::Push(int64_t step, bool sync,
                                const std::vector<SparseTransfer>& tables,
                                TransferStats* stats) {
  const int num_servers = static_cast<int>(servers_.size());
  std::vector<std::unique_ptr<PendingPush>> calls;
  auto packed = PackCalls(tables, num_servers, /*every_server=*/sync);
  for (int s = 0; s < num_servers; ++s) {
    for (const std::vector<Part>& parts : packed[s]) {
      auto p = std::make_unique<PendingPush>();
      p->server = servers_[s];
      stamp_->Stamp(&p->req);
      p->req.set_step(step);
      p->req.set_request_id(stamp_->NextRequestId());
      for (const Part& part : parts) {
        const SparseTransfer& t = *part.table;
        SparseRows* r = p->req.add_sparse();
        r->set_table_id(t.table_id);
        r->set_shard(s);
        r->set_num_chunks(part.num_chunks);
        FillKeys(part, r);
        std::string* values = r->mutable_values();
        const size_t row_bytes = sizeof(float) * t.dim;
        values->resize(part.positions.size() * row_bytes);
        for (size_t j = 0; j < part.positions.size(); ++j) {
          std::memcpy(values->data() + j * row_bytes,
                      t.grads + static_cast<size_t>(part.positions[j]) * t.dim,
                      row_bytes);
        }
      }
      calls.push_back(std::move(p));
    }
  }
  return SendPushes(calls, stats);
}

}  // namespace shardps
