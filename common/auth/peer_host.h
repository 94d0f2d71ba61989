#ifndef SHARDPS_COMMON_AUTH_PEER_HOST_H_
#define SHARDPS_COMMON_AUTH_PEER_HOST_H_

#include "absl/strings/string_view.h"

namespace shardps {

// Whether a gRPC peer ("ipv4:10.0.0.2:41234", "ipv6:[::1]:41234",
// "unix:/run/x.sock") is on this host: a Unix socket, a loopback address,
// or an address of one of this host's interfaces (in this network
// namespace; read at each call, since interfaces come and go). What may
// share memory with the pserver (docs/security.md). Anything it cannot
// parse is not.
bool PeerIsOnThisHost(absl::string_view grpc_peer);

}  // namespace shardps

#endif  // SHARDPS_COMMON_AUTH_PEER_HOST_H_
