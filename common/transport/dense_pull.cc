#include "common/transport/dense_pull.h"

#include "absl/strings/str_cat.h"
#include "compression/value_encoding.h"

namespace shardps {

absl::Status MismatchedPullBlock(absl::string_view from, int i) {
  return absl::DataLossError(
      absl::StrCat("pull from ", from, ": block ", i,
                   " of the reply does not match the request"));
}

absl::Status CheckPullBlockCounts(absl::string_view from,
                                  const PullRequest& req,
                                  const PullResponse& resp,
                                  const DensePullTargets& targets) {
  if (targets.size() != static_cast<size_t>(req.blocks_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("pull from ", from, ": ", req.blocks_size(),
                     " blocks asked for, ", targets.size(), " targets"));
  }
  if (resp.blocks_size() != req.blocks_size()) {
    return absl::DataLossError(absl::StrCat("pull from ", from, ": asked for ",
                                            req.blocks_size(), " blocks, got ",
                                            resp.blocks_size()));
  }
  return absl::OkStatus();
}

absl::Status TakeDensePull(absl::string_view from, const PullRequest& req,
                           const PullResponse& resp,
                           const DensePullTargets& targets) {
  if (absl::Status s = CheckPullBlockCounts(from, req, resp, targets);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < resp.blocks_size(); ++i) {
    const DenseBlock& got = resp.blocks(i);
    const BlockRef& want = req.blocks(i);
    if (got.table_id() != want.table_id() || got.block() != want.block() ||
        got.encoding() != req.encoding() ||
        !DecodeValues(got.values(), got.encoding(), targets[i]).ok()) {
      return MismatchedPullBlock(from, i);
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
