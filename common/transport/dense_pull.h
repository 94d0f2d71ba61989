#ifndef SHARDPS_COMMON_TRANSPORT_DENSE_PULL_H_
#define SHARDPS_COMMON_TRANSPORT_DENSE_PULL_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// Where the values of a dense pull go: one span per block of the
// PullRequest, in its order, each of the block's size (the caller's
// parameters). A transport writes them there (PsClientInterface::
// PullDenseAsync), from the reply's bytes or from memory of its own.
using DensePullTargets = std::vector<absl::Span<float>>;

// Checks that `resp` answers `req` (the same blocks in the same order, in
// the encoding asked for) and decodes each block's values into
// targets[i]; DATA_LOSS naming the pserver `from` otherwise
// (INVALID_ARGUMENT when `targets` does not have one span per block).
absl::Status TakeDensePull(absl::string_view from, const PullRequest& req,
                           const PullResponse& resp,
                           const DensePullTargets& targets);

// The counts TakeDensePull checks first: one target per block of `req`
// (INVALID_ARGUMENT otherwise) and as many blocks in `resp` (DATA_LOSS).
// For transports and clients that take replies their own way.
absl::Status CheckPullBlockCounts(absl::string_view from,
                                  const PullRequest& req,
                                  const PullResponse& resp,
                                  const DensePullTargets& targets);

// DATA_LOSS for block `i` of a reply from `from` that does not match its
// request (TakeDensePull, and transports that check their own replies).
absl::Status MismatchedPullBlock(absl::string_view from, int i);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_DENSE_PULL_H_
