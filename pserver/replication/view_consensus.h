#ifndef SHARDPS_PSERVER_REPLICATION_VIEW_CONSENSUS_H_
#define SHARDPS_PSERVER_REPLICATION_VIEW_CONSENSUS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace shardps {

// Which pservers serve, as the pservers agree on it (docs/replication.md,
// "Views"): view 0 has every pserver; each later view is decided by a
// majority of all the pservers, one Paxos instance per view number, so two
// pservers never hold different views under the same number and a
// pserver cut off from the majority cannot make one.
//
// The acceptor and the proposer are plain logic: the caller carries their
// messages (RPCs between pservers, or direct calls in tests) and saves the
// acceptor's state before answering (AcceptorState).
struct View {
  int64_t number = 0;
  std::vector<int> members;  // pserver indices, ascending, no repeats
  // Pservers coming back (docs/replication.md, "Rejoin and catch-up"):
  // they take their primaries' updates and state but are no one's primary
  // yet. Ascending, none in `members`.
  std::vector<int> joining;
  // primaries[s]: the primary of shard s (-1: none left). Empty: each
  // shard's first live replica (view 0, and the consensus tests).
  std::vector<int> primaries;

  bool operator==(const View& o) const {
    return number == o.number && members == o.members && joining == o.joining &&
           primaries == o.primaries;
  }
  bool operator!=(const View& o) const { return !(*this == o); }
  // In `members`.
  bool Has(int server) const;
  // In `members` or `joining`.
  bool Serves(int server) const;
  std::string DebugString() const;
};

// A proposal's rank: higher rounds win, ties go to the higher proposer id.
struct Ballot {
  int64_t round = 0;
  int proposer = -1;
  bool operator<(const Ballot& o) const {
    return round != o.round ? round < o.round : proposer < o.proposer;
  }
  bool operator==(const Ballot& o) const {
    return round == o.round && proposer == o.proposer;
  }
};

// What one pserver remembers of the agreement; all of it must be on disk
// before the pserver answers a Prepare or an Accept.
struct AcceptorState {
  View committed;  // the newest view this pserver knows decided
  // For the instance committed.number + 1:
  Ballot promised;                 // the highest ballot promised
  std::optional<Ballot> accepted;  // and what was accepted, if anything
  View accepted_view;
};

// One pserver's acceptor. Requires external synchronization.
class ViewAcceptor {
 public:
  explicit ViewAcceptor(AcceptorState state) : state_(std::move(state)) {}

  struct PrepareReply {
    // False: `ballot` was below one already promised (see `promised`), or
    // the instance is decided (`committed` is at or past it), or this
    // acceptor has not learned the view before it (`committed` is older).
    bool promised = false;
    Ballot promised_ballot;
    std::optional<Ballot> accepted;
    View accepted_view;
    View committed;
  };
  // Phase 1 of instance `number` (the view that follows number - 1).
  PrepareReply Prepare(int64_t number, const Ballot& ballot);
  // Phase 2: true when accepted.
  bool Accept(int64_t number, const Ballot& ballot, const View& view);
  // `view` was decided: kept (true) when newer than the committed one, and
  // within kMaxViewAdvance of it.
  bool Commit(const View& view);

  const AcceptorState& state() const { return state_; }

  // How far past its committed view an acceptor takes a view number from
  // another pserver: views move one at a time, so a pserver that missed a
  // few is within it, and a forged 2^63-1 (issue 34's audit: every later
  // view change failed) is not.
  static constexpr int64_t kMaxViewAdvance = 65536;
  // INVALID_ARGUMENT for a number below 0 or past kMaxViewAdvance (Commit
  // ignores such a view; Prepare and Accept take only the next number).
  absl::Status CheckNumber(int64_t number) const;

 private:
  AcceptorState state_;
};

// How a proposer reaches one pserver's acceptor: UNAVAILABLE (or any error)
// when it cannot; the proposer then counts it as not answering.
class ViewPeer {
 public:
  virtual ~ViewPeer() = default;
  virtual absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(
      int64_t number, const Ballot& ballot) = 0;
  virtual absl::StatusOr<bool> Accept(int64_t number, const Ballot& ballot,
                                      const View& view) = 0;
  virtual absl::Status Commit(const View& view) = 0;
  // The acceptor's state, read only (view_witness.h).
  virtual absl::StatusOr<AcceptorState> Inspect() = 0;
};

// Runs fn(i) for i in [0, n) at once, each on a thread of its own, and
// returns when all have: a peer that does not answer costs one deadline,
// not one per peer after it.
void ForEachPeer(size_t n, const std::function<void(size_t)>& fn);

// The view that `change` makes of a view, or nullopt when that view
// already has what the change wants (nothing to do).
using ViewChange = std::function<std::optional<View>(const View& current)>;

// Runs Paxos rounds with `peers` (one per pserver, all of them, reachable
// or not) until the decided view has what `change` wants, and returns it.
// `proposer` is this proposer's id (distinct among concurrent proposers).
// UNAVAILABLE, naming how many answered, when no majority answers within
// `max_rounds` rounds.
absl::StatusOr<View> ProposeView(absl::Span<ViewPeer* const> peers,
                                 int proposer, const ViewChange& change,
                                 int max_rounds = 20);

// Changes for ProposeView: without pserver `server`; with it.
ViewChange WithoutServer(int server);
ViewChange WithServer(int server);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_VIEW_CONSENSUS_H_
