#ifndef SHARDPS_COMMON_GRPC_GRPC_KEEPALIVE_H_
#define SHARDPS_COMMON_GRPC_GRPC_KEEPALIVE_H_

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace shardps {

// HTTP/2 keepalive between trainers and pservers, and between pservers, of
// a replicated job (docs/replication.md, "Faults"): a connection whose
// peer is cut off or paused fails its calls UNAVAILABLE within a few
// seconds, where without pings they would wait for their deadlines.

// The channel pings every second and drops the connection when a ping, or
// data sent, goes unanswered for `timeout` (gRPC also sets TCP's user
// timeout to it), with calls or without. Replicated jobs give the lease: a
// connection is dropped only after a lease of silence, which a lossy link
// (TCP retransmitting for seconds) does not reach.
void AddKeepaliveArgs(absl::Duration timeout, grpc::ChannelArguments* args);

// The server side: pings as often as every 500 ms are welcome, with calls
// or without (gRPC's default would answer them with GOAWAY
// "too_many_pings").
void AllowKeepalivePings(grpc::ServerBuilder* builder);

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_GRPC_KEEPALIVE_H_
