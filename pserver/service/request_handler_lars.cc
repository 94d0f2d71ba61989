// RequestHandler: LARS's norms (docs/tuning.md, "LARS"), a pull of blocks'
// squared norms and a push of tables' norms, converted for the store.
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/transport/wire_limits.h"
#include "pserver/service/request_handler.h"

namespace shardps {

void RequestHandler::PullNorms(const PullRequest& req, PullResponse* resp,
                               std::function<void(absl::Status)>& done) {
  absl::Status s =
      store_->CheckIncarnation(req.trainer_id(), req.incarnation());
  if (s.ok() && (req.sparse_size() > 0 || req.shared_region() != 0)) {
    s = absl::InvalidArgumentError(
        "a pull of LARS norms names dense blocks only, without a shared "
        "region");
  }
  if (s.ok() &&
      static_cast<size_t>(req.blocks_size()) > kMaxChunkBytes / sizeof(float)) {
    s = absl::ResourceExhaustedError(absl::StrCat(
        "a pull of norms names ", req.blocks_size(), " blocks; at most ",
        kMaxChunkBytes / sizeof(float), " fit in one request"));
  }
  std::vector<BlockId> blocks;
  absl::flat_hash_set<std::pair<uint32_t, uint32_t>> seen;
  for (int i = 0; s.ok() && i < req.blocks_size(); ++i) {
    const BlockRef& b = req.blocks(i);
    // Every block is named once, and the store finds each (NOT_FOUND
    // otherwise) before it writes a norm: what the pull allocates is
    // bounded by the blocks held, not by the request.
    if (!seen.insert({b.table_id(), b.block()}).second) {
      s = absl::InvalidArgumentError(
          absl::StrCat("table id ", b.table_id(), " block ", b.block(),
                       " is named twice in one request"));
    }
    blocks.push_back(BlockId{b.table_id(), b.block()});
  }

  if (!s.ok()) {
    done(s);
    return;
  }
  auto out = std::make_shared<std::vector<double>>(3 * blocks.size());
  store_->PullNorms(
      req.trainer_id(), req.min_version(), blocks, out->data(),
      [resp, done, out, blocks, step = req.min_version()](
          absl::Status st, absl::Duration waited) {
        for (size_t i = 0; st.ok() && i < blocks.size(); ++i) {
          if ((*out)[3 * i + 2] != static_cast<double>(step)) {
            // The block moved on between its release and the read (a
            // rollback): the trainer asks again.
            st = absl::AbortedError(absl::StrCat(
                "the norms of step ", step, " of table id ", blocks[i].table_id,
                " block ", blocks[i].block, " are gone"));
            break;
          }
          BlockNorms* n = resp->add_norms();
          n->set_table_id(blocks[i].table_id);
          n->set_block(blocks[i].block);
          n->set_weights((*out)[3 * i]);
          n->set_gradient((*out)[3 * i + 1]);
        }
        if (!st.ok()) resp->Clear();
        resp->set_wait_micros(absl::ToInt64Microseconds(waited));
        done(std::move(st));
      },
      req.generation());
}

absl::Status RequestHandler::PushTableNorms(const PushRequest& req) {
  // The store refuses a table named twice, before anything is applied.
  std::vector<TrustStep::TableNorm> tables;
  tables.reserve(req.table_norms_size());
  for (const TableNorms& t : req.table_norms()) {
    tables.push_back({t.table_id(),
                      t.weights(),
                      t.gradient(),
                      {t.blocks().begin(), t.blocks().end()}});
  }
  return store_->trust().Apply(req.trainer_id(), req.step(), tables,
                               req.generation());
}

}  // namespace shardps
