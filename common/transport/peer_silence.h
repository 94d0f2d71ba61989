#ifndef SHARDPS_COMMON_TRANSPORT_PEER_SILENCE_H_
#define SHARDPS_COMMON_TRANSPORT_PEER_SILENCE_H_

#include "absl/status/status.h"
#include "absl/strings/match.h"

namespace shardps {

// How a replicated job reads a failed call to a pserver (docs/replication.md,
// "Faults"). Plain string checks of gRPC's messages, kept in one place.

// The pserver's host refused the connection: the process is gone (a host
// that is down or cut off refuses nothing; its packets are dropped).
inline bool IsRefusedConnection(const absl::Status& s) {
  return absl::IsUnavailable(s) &&
         absl::StrContains(s.message(), "Connection refused");
}

// The connection was silent for the whole keepalive timeout, which
// replicated jobs set to the lease (common/grpc/grpc_keepalive.h): an
// unanswered ping, or TCP's user timeout on unacknowledged data, or a
// connect that timed out. The peer has answered nothing for the lease.
inline bool IsSilentForTheLease(const absl::Status& s) {
  return absl::IsUnavailable(s) &&
         (absl::StrContains(s.message(), "keepalive watchdog timeout") ||
          absl::StrContains(s.message(), "Connection timed out"));
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_PEER_SILENCE_H_
