#ifndef SHARDPS_TRAINER_CORE_JOB_CLIENTS_H_
#define SHARDPS_TRAINER_CORE_JOB_CLIENTS_H_

// How a trainer's side of a job reaches the pservers, from its options:
// the clients, and the lanes its dense values take (TrainingSession).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transport/ps_client_interface.h"
#include "compression/threshold_push_encoder.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/client/sparse_client.h"
#include "trainer/core/options.h"
#include "trainer/transport/replica_router.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// The clients of a job on `servers` (one per pserver, in --pservers
// order): the JobClient, and the ParamClient and SparseClient that pushes
// and pulls go through: with o.replication > 1, routed to each shard's
// primary by a ReplicaRouter over o.failover_servers (INVALID_ARGUMENT
// without enough pservers); dense values encoded as o.compression asks
// (threshold: with `threshold`). Destroy the router before the others (it
// calls the JobClient) and after the clients that use it.
struct JobClients {
  std::unique_ptr<JobClient> job;
  std::unique_ptr<ReplicaRouter> router;  // o.replication > 1 only
  std::unique_ptr<ParamClient> params;
  std::unique_ptr<SparseClient> sparse;
};
absl::StatusOr<JobClients> MakeJobClients(
    const TrainerOptions& o, const std::vector<PsClientInterface*>& servers,
    RequestStamp* stamp, const std::vector<DenseTableLayout>& layouts,
    const ThresholdPushEncoder::Options& threshold);

// Where dense values go besides gRPC, as `o` asks: shared regions with the
// pservers on this host (ParamClient::UseSharedMemory), the TCP lane with
// the others (UseTcpLane); nothing with replication. Logs the split of the
// `servers` pservers.
void OpenValueLanes(const TrainerOptions& o, ParamClient* params,
                    size_t servers);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_JOB_CLIENTS_H_
