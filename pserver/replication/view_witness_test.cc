#include "pserver/replication/view_witness.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

View ViewOf(int64_t number, std::vector<int> members) {
  View v;
  v.number = number;
  v.members = std::move(members);
  return v;
}

AcceptorState Committed(const View& v) {
  AcceptorState s;
  s.committed = v;
  return s;
}

AcceptorState Accepted(const View& committed, const View& v, Ballot b) {
  AcceptorState s = Committed(committed);
  s.promised = b;
  s.accepted = b;
  s.accepted_view = v;
  return s;
}

const View kStart = ViewOf(3, {0, 1, 2, 3, 4});
const View kNext = ViewOf(4, {0, 1, 2, 3});

TEST(ViewWitnessTest, OneCallersWordIsNotEnough) {
  // One pserver committed a view no other accepted (a forged ViewCommit
  // it took, or a lie).
  std::vector<AcceptorState> states = {Committed(kNext), Committed(kStart),
                                       Committed(kStart), Committed(kStart)};
  EXPECT_FALSE(DecidedView(states, 5, 3).has_value());
  // Two of five are no majority either.
  states[1] = Committed(kNext);
  EXPECT_FALSE(DecidedView(states, 5, 3).has_value());
  states[2] = Committed(kNext);
  EXPECT_EQ(DecidedView(states, 5, 3), kNext);
  // Nothing newer than what the asker knows.
  EXPECT_FALSE(DecidedView(states, 5, 4).has_value());
}

TEST(ViewWitnessTest, AcceptedAtOneBallotCountsWithCommitted) {
  const Ballot b{2, 1};
  // The proposer's commit reached one; two more accepted at its ballot.
  std::vector<AcceptorState> states = {
      Committed(kNext), Accepted(kStart, kNext, b), Accepted(kStart, kNext, b)};
  EXPECT_EQ(DecidedView(states, 5, 3), kNext);
  // Accepted at different ballots: no majority accepted one proposal, and
  // a later proposer may yet decide another view.
  states = {Accepted(kStart, kNext, b), Accepted(kStart, kNext, Ballot{3, 0}),
            Accepted(kStart, kNext, Ballot{4, 2})};
  EXPECT_FALSE(DecidedView(states, 5, 3).has_value());
  // Accepted in the wrong instance (the acceptor is behind): not counted.
  states = {Committed(kNext), Committed(kNext),
            Accepted(ViewOf(1, {0, 1, 2, 3, 4}), kNext, b)};
  EXPECT_FALSE(DecidedView(states, 5, 3).has_value());
}

TEST(ViewWitnessTest, TheNewestDecidedViewWins) {
  const View later = ViewOf(5, {0, 1, 2});
  // The pservers moved on while the asker was told of view 4: 5 is
  // learned (a view number jumps within ViewAcceptor::kMaxViewAdvance).
  std::vector<AcceptorState> states = {Committed(later), Committed(later),
                                       Committed(kNext), Committed(later)};
  EXPECT_EQ(DecidedView(states, 5, 3), later);
  // Views with the same number but other members are other views.
  View other = kNext;
  other.members = {1, 2, 3, 4};
  states = {Committed(kNext), Committed(other), Committed(kNext),
            Committed(other)};
  EXPECT_FALSE(DecidedView(states, 5, 3).has_value());
}

class FakePeer : public ViewPeer {
 public:
  explicit FakePeer(absl::StatusOr<AcceptorState> state)
      : state_(std::move(state)) {}
  absl::StatusOr<ViewAcceptor::PrepareReply> Prepare(int64_t,
                                                     const Ballot&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<bool> Accept(int64_t, const Ballot&, const View&) override {
    return absl::UnimplementedError("");
  }
  absl::Status Commit(const View&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<AcceptorState> Inspect() override { return state_; }

 private:
  absl::StatusOr<AcceptorState> state_;
};

TEST(ViewWitnessTest, AsksEveryPserverAndCountsWhoAnswered) {
  FakePeer a(Committed(kNext)), b(Committed(kNext)),
      c(absl::UnavailableError("cut")), d(Committed(kNext)),
      e(absl::DeadlineExceededError("slow"));
  std::vector<ViewPeer*> peers = {&a, &b, &c, &d, &e};
  Witnessed w = WitnessView(peers, 3);
  EXPECT_EQ(w.answered, 3);
  EXPECT_EQ(w.decided, kNext);
  // Three answers of five, but a majority of all five is needed.
  FakePeer behind(Committed(kStart));
  peers[3] = &behind;
  w = WitnessView(peers, 3);
  EXPECT_EQ(w.answered, 3);
  EXPECT_FALSE(w.decided.has_value());
}

}  // namespace
}  // namespace shardps
