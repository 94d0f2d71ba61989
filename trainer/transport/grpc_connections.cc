#include "trainer/transport/grpc_connections.h"

namespace shardps {

std::unique_ptr<PserverConnections> ConnectPservers(
    const ConnectionOptions& c, const FailoverOptions& failover) {
  auto conn = std::make_unique<PserverConnections>();
  RpcOptions rpc;
  rpc.retry_budget = c.rpc_retry;
  rpc.job_id = c.job_id;
  RpcOptions hb;
  hb.job_id = c.job_id;
  hb.attempt_deadline = c.heartbeat_interval * 2 + absl::Seconds(1);
  hb.retry_budget = c.heartbeat_interval;
  // Failover clients give up on a host that refuses connections after the
  // failover delay and drop a connection silent for the lease (the router
  // then moves the shard).
  RpcOptions fo;
  fo.job_id = c.job_id;
  fo.retry_budget = failover.failover_after;
  fo.initial_backoff = absl::Milliseconds(10);
  fo.max_backoff = absl::Milliseconds(50);
  fo.keepalive = failover.lease;
  for (const std::string& a : c.addresses) {
    conn->clients.push_back(
        GrpcPsClient::Create(a, rpc, &conn->timer, c.security));
    conn->servers.push_back(conn->clients.back().get());
    if (c.heartbeat_interval > absl::ZeroDuration()) {
      conn->heartbeat_clients.push_back(
          GrpcPsClient::Create(a, hb, &conn->timer, c.security));
      conn->heartbeat_servers.push_back(conn->heartbeat_clients.back().get());
    }
    if (failover.replication > 1) {
      conn->failover_clients.push_back(
          GrpcPsClient::Create(a, fo, &conn->timer, c.security));
      conn->failover_servers.push_back(conn->failover_clients.back().get());
    }
  }
  return conn;
}

}  // namespace shardps
