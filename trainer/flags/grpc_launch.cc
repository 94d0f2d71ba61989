#include "trainer/flags/grpc_launch.h"

namespace shardps {

std::unique_ptr<PserverConnections> ConnectTrainer(TrainerLaunch* launch) {
  TrainerOptions& o = launch->options;
  std::unique_ptr<PserverConnections> conn = ConnectPservers(
      launch->connection, {o.replication, o.failover_after, o.pserver_lease});
  o.heartbeat_servers = conn->heartbeat_servers;
  o.failover_servers = conn->failover_servers;
  o.heartbeat_interval = launch->connection.heartbeat_interval;
  return conn;
}

}  // namespace shardps
