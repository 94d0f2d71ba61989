#ifndef SHARDPS_PSERVER_REPLICATION_REPLICATION_WIRE_H_
#define SHARDPS_PSERVER_REPLICATION_REPLICATION_WIRE_H_

#include "absl/status/statusor.h"
#include "proto/replication.pb.h"
#include "pserver/replication/view_consensus.h"
#include "pserver/store/step/step_barrier.h"

namespace shardps {

// The messages of proto/replication.proto to and from their C++ forms
// (docs/replication.md). The From* functions treat a message as another
// process's word: INVALID_ARGUMENT, naming the field, for anything the C++
// form cannot hold (members out of order, gradient bytes not whole floats,
// repeated keys, a scale count that fits no key count); sizes against a
// unit are checked where the update is applied (BarrierUnit::ApplyReplicated).

void ToMessage(const View& view, ViewMessage* out);
absl::StatusOr<View> FromMessage(const ViewMessage& m);

void ToMessage(const Ballot& ballot, BallotMessage* out);
Ballot FromMessage(const BallotMessage& m);

// A Prepare's answer; a view in it that is malformed is INVALID_ARGUMENT.
void ToMessage(const ViewAcceptor::PrepareReply& r, ViewPrepareResponse* out);
absl::StatusOr<ViewAcceptor::PrepareReply> FromMessage(
    const ViewPrepareResponse& m);

// An acceptor's state (ViewInspect's answer, with `promised` false).
void ToMessage(const AcceptorState& s, ViewPrepareResponse* out);
absl::StatusOr<AcceptorState> StateOf(const ViewPrepareResponse& m);

void ToMessage(const AppliedUpdate& update, ReplicatedUpdate* out);
absl::StatusOr<AppliedUpdate> FromMessage(const ReplicatedUpdate& m);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_REPLICATION_WIRE_H_
