#include "trainer/core/job_clients.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {
absl::StatusOr<JobClients> MakeJobClients(
    const TrainerOptions& o, const std::vector<PsClientInterface*>& servers,
    RequestStamp* stamp, const std::vector<DenseTableLayout>& layouts,
    const ThresholdPushEncoder::Options& threshold) {
  JobClients c;
  c.job = std::make_unique<JobClient>(servers, stamp);
  std::vector<PsClientInterface*> data = servers;
  if (o.replication > 1) {
    if (o.replication > static_cast<int>(servers.size()) ||
        o.failover_servers.size() != servers.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--replication=", o.replication, " needs at least as many pservers (",
          servers.size(), " in --pservers)"));
    }
    ReplicaRouter::Options ro;
    ro.replication = o.replication;
    ro.sync = o.mode == SYNC;
    ro.trainer_id = o.trainer_id;
    ro.lease = o.pserver_lease;
    ro.give_up_after = std::max(absl::Seconds(60), 15 * o.pserver_lease);
    c.router = std::make_unique<ReplicaRouter>(o.failover_servers, ro);
    data = c.router->shard_clients();
    ReplicaRouter* r = c.router.get();
    c.job->set_replication(o.replication, [r](int s) { return r->Live(s); });
  }
  c.params = std::make_unique<ParamClient>(data, stamp, layouts);
  c.sparse = std::make_unique<SparseClient>(data, stamp);
  switch (o.compression) {
    case Compression::kNone:
      break;
    case Compression::kFp16:
      c.params->set_encodings(FLOAT16, FLOAT16);
      break;
    case Compression::kBf16:
      c.params->set_encodings(BFLOAT16, BFLOAT16);
      break;
    case Compression::kThreshold:
      c.params->set_threshold_compression(threshold);
      if (o.compressed_pulls) c.params->set_encodings(FLOAT32, THRESHOLD);
      break;
  }
  return c;
}

void OpenValueLanes(const TrainerOptions& o, ParamClient* params,
                    size_t servers) {
  // Replicated shards move between pservers; their values go over gRPC.
  if (o.replication > 1) return;
  const int n = o.shared_memory ? params->UseSharedMemory() : 0;
  int lanes = 0;
  if (o.tcp_lane) {
    TcpLanePsClient::Options lane;
    lane.connections = o.tcp_lane_connections;
    lane.spin = o.tcp_lane_spin;
    lanes = params->UseTcpLane(lane);
  }
  const int grpc = static_cast<int>(servers) - n - lanes;
  LOG(INFO) << "trainer " << o.trainer_id << ": dense values through "
            << "shared memory with " << n << " of " << servers << " pservers"
            << (lanes > 0 ? absl::StrCat(", over the TCP lane with ", lanes)
                          : "")
            << (grpc > 0 ? absl::StrCat(", over gRPC with ", grpc,
                                        " (the log above says why)")
                         : "");
}

}  // namespace shardps
