#include "pserver/replication/view_witness.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace shardps {
namespace {

// How many of `states` vouch for `v`: those that committed it, and the
// most that accepted it at one ballot in the instance before it (values
// accepted at different ballots may never have been decided).
int Vouchers(absl::Span<const AcceptorState> states, const View& v) {
  int committed = 0;
  std::map<std::pair<int64_t, int>, int> accepted;  // by ballot
  for (const AcceptorState& s : states) {
    if (s.committed == v) {
      ++committed;
    } else if (s.committed.number + 1 == v.number && s.accepted.has_value() &&
               s.accepted_view == v) {
      ++accepted[{s.accepted->round, s.accepted->proposer}];
    }
  }
  int most = 0;
  for (const auto& [ballot, n] : accepted) most = std::max(most, n);
  return committed + most;
}

}  // namespace

std::optional<View> DecidedView(absl::Span<const AcceptorState> states,
                                int num_servers, int64_t after) {
  const int majority = num_servers / 2 + 1;
  std::optional<View> best;
  auto consider = [&](const View& v) {
    if (v.number <= after || (best.has_value() && v.number <= best->number)) {
      return;
    }
    if (Vouchers(states, v) >= majority) best = v;
  };
  for (const AcceptorState& s : states) {
    consider(s.committed);
    if (s.accepted.has_value()) consider(s.accepted_view);
  }
  return best;
}

Witnessed WitnessView(absl::Span<ViewPeer* const> peers, int64_t after) {
  std::vector<std::optional<AcceptorState>> answers(peers.size());
  ForEachPeer(peers.size(), [&](size_t i) {
    absl::StatusOr<AcceptorState> s = peers[i]->Inspect();
    if (s.ok()) answers[i] = *std::move(s);
  });
  std::vector<AcceptorState> states;
  for (std::optional<AcceptorState>& a : answers) {
    if (a.has_value()) states.push_back(*std::move(a));
  }
  Witnessed w;
  w.answered = static_cast<int>(states.size());
  w.decided = DecidedView(states, static_cast<int>(peers.size()), after);
  return w;
}

}  // namespace shardps
