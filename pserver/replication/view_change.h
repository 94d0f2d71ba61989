#ifndef SHARDPS_PSERVER_REPLICATION_VIEW_CHANGE_H_
#define SHARDPS_PSERVER_REPLICATION_VIEW_CHANGE_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "pserver/replication/view_consensus.h"

namespace shardps {

// Which view follows which (docs/replication.md, "Views" and "Faults"):
// the rules ReplicaSet::ChangeView proposes by, as plain functions.

// A job's replica placement: shard s lives on pservers s, ..., s+R-1
// (mod P), and `self` is the pserver asking.
struct ReplicaLayout {
  int self = 0;
  int num_servers = 1;  // P
  int replication = 1;  // R
};

// Pservers to take out of the view, to add as joining (a member that
// lost its state joins again), and to move from joining to members.
struct MembershipChange {
  std::vector<int> remove;
  std::vector<int> join;
  std::vector<int> promote;
};

// The primary of `shard` in `v` (-1: none): v.primaries, or where the
// view lists none (view 0) the shard's first member replica.
int PrimaryIn(const View& v, int shard, const ReplicaLayout& layout);

// The view that follows `cur` with `change` made: primaries stay while
// they are members, a shard whose primary left goes to its first member
// replica. nullopt when `cur` has what the change wants already.
// FAILED_PRECONDITION, naming why, when `layout.self` would take a
// pserver out without being a member of `cur` itself, or when the view
// would leave a shard that has a primary in `cur` with no member.
absl::StatusOr<std::optional<View>> NextView(const View& cur,
                                             const MembershipChange& change,
                                             const ReplicaLayout& layout);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_VIEW_CHANGE_H_
