#include "pserver/replication/view_consensus.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

bool View::Has(int server) const {
  return std::binary_search(members.begin(), members.end(), server);
}

bool View::Serves(int server) const {
  return Has(server) ||
         std::binary_search(joining.begin(), joining.end(), server);
}

std::string View::DebugString() const {
  std::string s =
      absl::StrCat("view ", number, " {", absl::StrJoin(members, ","), "}");
  if (!joining.empty()) {
    absl::StrAppend(&s, " joining {", absl::StrJoin(joining, ","), "}");
  }
  if (!primaries.empty()) {
    absl::StrAppend(&s, " primaries [", absl::StrJoin(primaries, ","), "]");
  }
  return s;
}

ViewAcceptor::PrepareReply ViewAcceptor::Prepare(int64_t number,
                                                 const Ballot& ballot) {
  PrepareReply r;
  r.committed = state_.committed;
  r.promised_ballot = state_.promised;
  // Decided already, or this acceptor lacks the view before it.
  if (number != state_.committed.number + 1) return r;
  if (ballot < state_.promised) return r;
  state_.promised = ballot;
  r.promised = true;
  r.promised_ballot = ballot;
  r.accepted = state_.accepted;
  r.accepted_view = state_.accepted_view;
  return r;
}

bool ViewAcceptor::Accept(int64_t number, const Ballot& ballot,
                          const View& view) {
  if (number != state_.committed.number + 1 || view.number != number ||
      ballot < state_.promised) {
    return false;
  }
  state_.promised = ballot;
  state_.accepted = ballot;
  state_.accepted_view = view;
  return true;
}

bool ViewAcceptor::Commit(const View& view) {
  if (view.number <= state_.committed.number ||
      !CheckNumber(view.number).ok()) {
    return false;
  }
  state_.committed = view;
  // The next instance starts empty.
  state_.promised = Ballot{};
  state_.accepted.reset();
  state_.accepted_view = View{};
  return true;
}

void ForEachPeer(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&fn, i] { fn(i); });
  for (std::thread& t : threads) t.join();
}

namespace {

// What one round's first phase found.
struct Phase1 {
  int answered = 0;
  std::vector<ViewAcceptor::PrepareReply> promises;
  View newest;            // the newest decided view any peer knows
  int64_t top_round = 0;  // the highest round any peer has promised
};

Phase1 PrepareAll(absl::Span<ViewPeer* const> peers, int64_t number,
                  const Ballot& ballot, const View& known) {
  Phase1 p;
  p.newest = known;
  std::vector<absl::StatusOr<ViewAcceptor::PrepareReply>> replies(
      peers.size(), absl::UnavailableError("not asked"));
  ForEachPeer(peers.size(), [&](size_t i) {
    replies[i] = peers[i]->Prepare(number, ballot);
  });
  for (absl::StatusOr<ViewAcceptor::PrepareReply>& r : replies) {
    if (!r.ok()) continue;
    ++p.answered;
    if (r->committed.number > p.newest.number) p.newest = r->committed;
    p.top_round = std::max(p.top_round, r->promised_ballot.round);
    if (r->promised) p.promises.push_back(*std::move(r));
  }
  return p;
}

void CommitAll(absl::Span<ViewPeer* const> peers, const View& view) {
  ForEachPeer(peers.size(),
              [&](size_t i) { peers[i]->Commit(view).IgnoreError(); });
}

}  // namespace

absl::StatusOr<View> ProposeView(absl::Span<ViewPeer* const> peers,
                                 int proposer, const ViewChange& change,
                                 int max_rounds) {
  const int majority = static_cast<int>(peers.size()) / 2 + 1;
  View known;
  known.number = -1;  // not learned yet
  int64_t round = 1;
  int best_answered = 0;
  for (int attempt = 0; attempt < max_rounds; ++attempt) {
    const int64_t number = known.number + 1;
    const Ballot ballot{round, proposer};
    Phase1 p = PrepareAll(peers, number, ballot, known);
    best_answered = std::max(best_answered, p.answered);
    round = std::max(round, p.top_round) + 1;
    if (p.newest.number > known.number) {
      // Peers behind the newest view learn it, so that they can take part.
      known = p.newest;
      CommitAll(peers, known);
      if (number <= known.number) {
        if (!change(known)) return known;
        continue;  // the next instance
      }
    }
    if (known.number < 0) continue;  // nobody answered yet
    if (static_cast<int>(p.promises.size()) < majority) continue;
    // A view some acceptor accepted may have been decided: propose the one
    // of the highest ballot, and this proposer's own change after it.
    const ViewAcceptor::PrepareReply* top = nullptr;
    for (const auto& r : p.promises) {
      if (r.accepted && (top == nullptr || *top->accepted < *r.accepted)) {
        top = &r;
      }
    }
    View value;
    if (top != nullptr) {
      value = top->accepted_view;
    } else {
      std::optional<View> next = change(known);
      if (!next) return known;
      value = *std::move(next);
      value.number = number;
    }
    std::atomic<int> accepted{0};
    ForEachPeer(peers.size(), [&](size_t i) {
      absl::StatusOr<bool> ok = peers[i]->Accept(number, ballot, value);
      if (ok.ok() && *ok) accepted.fetch_add(1);
    });
    if (accepted < majority) continue;
    known = value;
    CommitAll(peers, known);
    if (!change(known)) return known;
  }
  return absl::UnavailableError(
      absl::StrCat("no view agreed: at most ", best_answered, " of ",
                   peers.size(), " pservers answered, ", majority, " needed"));
}

ViewChange WithoutServer(int server) {
  return [server](const View& v) -> std::optional<View> {
    if (!v.Has(server)) return std::nullopt;
    View next = v;
    next.members.erase(
        std::find(next.members.begin(), next.members.end(), server));
    next.number = v.number + 1;
    return next;
  };
}

ViewChange WithServer(int server) {
  return [server](const View& v) -> std::optional<View> {
    if (v.Has(server)) return std::nullopt;
    View next = v;
    next.members.insert(
        std::upper_bound(next.members.begin(), next.members.end(), server),
        server);
    next.number = v.number + 1;
    return next;
  };
}

absl::Status ViewAcceptor::CheckNumber(int64_t number) const {
  const int64_t committed = state_.committed.number;
  if (number < 0 || number > committed + kMaxViewAdvance) {
    return absl::InvalidArgumentError(absl::StrCat(
        "view ", number, ": views move one at a time; this pserver is in view ",
        committed, " and takes none past ", committed + kMaxViewAdvance));
  }
  return absl::OkStatus();
}

}  // namespace shardps
