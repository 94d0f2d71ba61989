#ifndef SHARDPS_PSERVER_REPLICATION_VIEW_WITNESS_H_
#define SHARDPS_PSERVER_REPLICATION_VIEW_WITNESS_H_

#include <cstdint>
#include <optional>

#include "absl/types/span.h"
#include "pserver/replication/view_consensus.h"

namespace shardps {

// Whether a view another pserver (or a trainer) tells of was decided
// (docs/replication.md, "Views"). A pserver learns a newer view only from
// the pservers' own acceptor states, each read over its own connection
// (ViewPeer::Inspect): one caller's word, a forged ViewCommit or a
// Forward carrying a made-up view, is not enough (issue 34's audit: a
// healthy pserver was taken out of a job's view by one ViewCommit).

// The newest view numbered after `after` that `states` (one per pserver
// that answered) show decided by a majority of `num_servers`: a view is
// decided when the pservers that committed it and those that accepted it
// at one ballot in the instance before are a majority. nullopt when none.
std::optional<View> DecidedView(absl::Span<const AcceptorState> states,
                                int num_servers, int64_t after);

// Asks every pserver in `peers` (all of them, this one included, at once)
// for its acceptor state: the decided view after `after`, if any, and how
// many answered.
struct Witnessed {
  std::optional<View> decided;
  int answered = 0;
};
Witnessed WitnessView(absl::Span<ViewPeer* const> peers, int64_t after);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_VIEW_WITNESS_H_
