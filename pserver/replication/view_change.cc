#include "pserver/replication/view_change.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/placement/shard_map.h"

namespace shardps {
namespace {

void Drop(std::vector<int>* list, int s) {
  list->erase(std::remove(list->begin(), list->end(), s), list->end());
}

}  // namespace

int PrimaryIn(const View& v, int shard, const ReplicaLayout& layout) {
  if (static_cast<size_t>(shard) < v.primaries.size()) {
    return v.primaries[shard];
  }
  return PrimaryServer(shard, layout.replication, layout.num_servers,
                       v.members);
}

absl::StatusOr<std::optional<View>> NextView(const View& cur,
                                             const MembershipChange& change,
                                             const ReplicaLayout& layout) {
  if (!change.remove.empty() && !cur.Has(layout.self)) {
    return absl::FailedPreconditionError(
        absl::StrCat("pserver ", layout.self, " is not a member of ",
                     cur.DebugString(), ": it takes no pserver out"));
  }
  View next = cur;
  next.primaries.clear();
  for (int s : change.remove) {
    Drop(&next.members, s);
    Drop(&next.joining, s);
  }
  for (int s : change.join) {
    Drop(&next.members, s);
    if (!next.Serves(s)) next.joining.push_back(s);
  }
  for (int s : change.promote) {
    if (std::find(next.joining.begin(), next.joining.end(), s) ==
        next.joining.end()) {
      continue;
    }
    Drop(&next.joining, s);
    next.members.push_back(s);
  }
  std::sort(next.members.begin(), next.members.end());
  std::sort(next.joining.begin(), next.joining.end());
  if (next.members == cur.members && next.joining == cur.joining) {
    return std::nullopt;
  }
  std::vector<int> orphans;
  for (int shard = 0; shard < layout.num_servers; ++shard) {
    const int p = PrimaryIn(cur, shard, layout);
    int chosen = -1;
    if (p >= 0 && next.Has(p)) {
      chosen = p;
    } else {
      for (int r :
           ReplicaServers(shard, layout.replication, layout.num_servers)) {
        if (next.Has(r)) {
          chosen = r;
          break;
        }
      }
    }
    if (chosen < 0 && p >= 0) orphans.push_back(shard);
    next.primaries.push_back(chosen);
  }
  if (!orphans.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a view without pserver(s) {", absl::StrJoin(change.remove, ","),
        "} and joining {", absl::StrJoin(change.join, ","),
        "} would leave shard(s) {", absl::StrJoin(orphans, ","),
        "} with no member holding them (", cur.DebugString(),
        "): refused; the job needs a live replica of every shard"));
  }
  next.number = cur.number + 1;
  return next;
}

}  // namespace shardps
