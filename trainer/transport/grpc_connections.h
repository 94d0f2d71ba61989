#ifndef SHARDPS_TRAINER_TRANSPORT_GRPC_CONNECTIONS_H_
#define SHARDPS_TRAINER_TRANSPORT_GRPC_CONNECTIONS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/transport/ps_client_interface.h"
#include "trainer/transport/connection_options.h"
#include "trainer/transport/grpc_ps_client.h"
#include "trainer/transport/retry_timer.h"

namespace shardps {

// The gRPC clients of the pservers, one each, in --pservers order, for the
// training calls; with heartbeats, one each that gives up within an
// interval, so that one unreachable pserver never holds the heartbeats up;
// with replication, one each for pushes and pulls that gives up on an
// unreachable pserver after the failover delay (its shard then moves to a
// backup). The clients share one retry timer.
struct PserverConnections {
  RetryTimer timer;
  std::vector<std::unique_ptr<GrpcPsClient>> clients;
  std::vector<std::unique_ptr<GrpcPsClient>> heartbeat_clients;
  std::vector<std::unique_ptr<GrpcPsClient>> failover_clients;
  std::vector<PsClientInterface*> servers;
  std::vector<PsClientInterface*> heartbeat_servers;  // empty: no heartbeats
  std::vector<PsClientInterface*> failover_servers;   // empty: replication 1
};

// Replication of the job, for the failover clients: `replication` copies
// (1: none), failing over after `failover_after`, a connection silent for
// `lease` dropped.
struct FailoverOptions {
  int replication = 1;
  absl::Duration failover_after;
  absl::Duration lease;
};

// Opens (lazily, as gRPC channels do) the connections of `c`.
std::unique_ptr<PserverConnections> ConnectPservers(
    const ConnectionOptions& c, const FailoverOptions& failover);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_GRPC_CONNECTIONS_H_
