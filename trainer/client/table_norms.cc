#include "trainer/client/table_norms.h"

#include <cmath>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "glog/logging.h"

namespace shardps {

namespace {

// A push of tables' norms to one pserver.
struct NormsPush {
  PsClientInterface* server = nullptr;
  PushRequest req;
  PushResponse resp;
  absl::Status status;
};

// Sends `to_send`, each ending with its status. Replicated: a shard's new
// primary, after a failover, assembles the step again from the pushes the
// trainers send it again, and norms that reach it before the last of them
// are refused "not assembled yet"; its norms pull (`pull_of`) waits for the
// step, then the norms go again (a new request id: the refused one applied
// nothing), a few times at most.
void SendNorms(int64_t step, std::vector<NormsPush*> to_send,
               const std::map<PsClientInterface*, PullRequest>& pull_of,
               RequestStamp* stamp) {
  for (int round = 0; !to_send.empty(); ++round) {
    absl::BlockingCounter pushed(static_cast<int>(to_send.size()));
    for (NormsPush* p : to_send) {
      p->resp.Clear();
      p->server->PushAsync(p->req, &p->resp, [p, &pushed](absl::Status st) {
        p->status = std::move(st);
        pushed.DecrementCount();
      });
    }
    pushed.Wait();
    std::vector<NormsPush*> again;
    for (NormsPush* p : to_send) {
      if (absl::IsFailedPrecondition(p->status) &&
          absl::StrContains(p->status.message(), "not assembled yet")) {
        again.push_back(p);
      }
    }
    to_send.clear();
    if (round >= 3) break;
    for (NormsPush* p : again) {
      LOG(WARNING) << "LARS norms of step " << step << " to "
                   << p->server->address()
                   << ": the step is being assembled again there (after a "
                      "failover); waiting for it";
      PullResponse resp;
      absl::Status st = p->server->Pull(pull_of.at(p->server), &resp);
      if (!st.ok()) {
        p->status = absl::Status(
            st.code(),
            absl::StrCat("waiting for the step to be assembled again: ",
                         st.message()));
        continue;
      }
      p->req.set_request_id(stamp->NextRequestId());
      to_send.push_back(p);
    }
  }
}

// Each pserver's answer to its norms pull, and the pull's status.
using PullAnswers =
    std::map<PsClientInterface*, std::pair<PullResponse, absl::Status>>;

// (table, block) -> squared norms (weights, gradient).
using BlockNormParts =
    std::map<std::pair<uint32_t, uint32_t>, std::pair<double, double>>;

// Sends every pull of `pulls` at once and waits for all the answers.
PullAnswers PullAll(const std::map<PsClientInterface*, PullRequest>& pulls) {
  PullAnswers answers;
  for (const auto& [server, req] : pulls) answers[server];
  absl::BlockingCounter pulled(static_cast<int>(pulls.size()));
  for (const auto& [server, req] : pulls) {
    auto* answer = &answers[server];
    server->PullAsync(req, &answer->first, [answer, &pulled](absl::Status st) {
      answer->second = std::move(st);
      pulled.DecrementCount();
    });
  }
  pulled.Wait();
  return answers;
}

// The block norms of the `answers` to `pulls`, by (table, block); the first
// failed or short answer, in `servers` (--pservers) order, is the error.
absl::StatusOr<BlockNormParts> GatherBlockNorms(
    int64_t step, const std::vector<PsClientInterface*>& servers,
    const std::map<PsClientInterface*, PullRequest>& pulls,
    const PullAnswers& answers) {
  // (table, block) -> squared norms; summed in that order.
  BlockNormParts parts;
  for (PsClientInterface* server : servers) {  // errors in --pservers order
    if (answers.count(server) == 0) continue;
    const auto& [resp, status] = answers.at(server);
    if (!status.ok()) {
      return absl::Status(
          status.code(),
          absl::StrCat("LARS norms of step ", step, " from ", server->address(),
                       ": ", status.message()));
    }
    const int asked = pulls.at(server).blocks_size();
    if (resp.norms_size() != asked) {
      return absl::DataLossError(
          absl::StrCat(server->address(), " answered ", resp.norms_size(),
                       " block norms for ", asked, " blocks"));
    }
    for (const BlockNorms& n : resp.norms()) {
      parts[{n.table_id(), n.block()}] = {n.weights(), n.gradient()};
    }
  }
  return parts;
}

}  // namespace

absl::Status TableNormExchange::Exchange(int64_t step,
                                         const std::vector<bool>& lars) {
  std::map<PsClientInterface*, PullRequest> pulls;
  TablesOf tables_of(servers_.size());
  absl::StatusOr<Sums> sums = PullNorms(step, lars, &pulls, &tables_of);
  if (!sums.ok()) return sums.status();
  return PushNorms(step, *sums, tables_of, pulls);
}

absl::StatusOr<TableNormExchange::Sums> TableNormExchange::PullNorms(
    int64_t step, const std::vector<bool>& lars,
    std::map<PsClientInterface*, PullRequest>* pulls, TablesOf* tables_of) {
  // One pull per pserver holding LARS blocks, of all of them.
  for (size_t s = 0; s < servers_.size(); ++s) {
    PullRequest req;
    for (const std::vector<BlockPlacement>& chunk : chunks_[s]) {
      for (const BlockPlacement& b : chunk) {
        if (b.table_id >= lars.size() || !lars[b.table_id]) continue;
        BlockRef* r = req.add_blocks();
        r->set_table_id(b.table_id);
        r->set_block(b.block);
        (*tables_of)[s][b.table_id].push_back(b.block);
      }
    }
    if (req.blocks_size() == 0) continue;
    stamp_->Stamp(&req);
    req.set_min_version(step);
    req.set_lars_norms(true);
    (*pulls)[servers_[s]] = std::move(req);
  }
  const PullAnswers answers = PullAll(*pulls);
  absl::StatusOr<BlockNormParts> parts =
      GatherBlockNorms(step, servers_, *pulls, answers);
  if (!parts.ok()) return parts.status();
  Sums sums;
  for (const auto& [id, n] : *parts) {
    sums[id.first].first += n.first;
    sums[id.first].second += n.second;
  }
  for (const auto& [table, n] : sums) {
    if (!std::isfinite(n.first) || !std::isfinite(n.second)) {
      // The pservers refuse such norms; say why here, at once.
      return absl::FailedPreconditionError(absl::StrCat(
          "LARS table id ", table, " diverged at step ", step,
          ": squared norms of weights ", n.first, " and gradient ", n.second));
    }
  }
  return sums;
}

absl::Status TableNormExchange::PushNorms(
    int64_t step, Sums sums, const TablesOf& tables_of,
    const std::map<PsClientInterface*, PullRequest>& pulls) {
  std::vector<std::unique_ptr<NormsPush>> pushes;
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (tables_of[s].empty()) continue;
    auto call = std::make_unique<NormsPush>();
    call->server = servers_[s];
    stamp_->Stamp(&call->req);
    call->req.set_step(step);
    call->req.set_request_id(stamp_->NextRequestId());
    for (const auto& [t, blocks] : tables_of[s]) {
      TableNorms* n = call->req.add_table_norms();
      n->set_table_id(t);
      n->set_weights(std::sqrt(sums[t].first));
      n->set_gradient(std::sqrt(sums[t].second));
      n->mutable_blocks()->Assign(blocks.begin(), blocks.end());
    }
    pushes.push_back(std::move(call));
  }
  std::vector<NormsPush*> to_send;
  for (auto& c : pushes) to_send.push_back(c.get());
  SendNorms(step, std::move(to_send), pulls, stamp_);
  for (const auto& c : pushes) {
    if (!c->status.ok()) {
      return absl::Status(
          c->status.code(),
          absl::StrCat("LARS norms of step ", step, " to ",
                       c->server->address(), ": ", c->status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
