#ifndef SHARDPS_TRAINER_FLAGS_GRPC_LAUNCH_H_
#define SHARDPS_TRAINER_FLAGS_GRPC_LAUNCH_H_

#include <memory>

#include "trainer/flags/flags.h"
#include "trainer/transport/grpc_connections.h"

namespace shardps {

// Both front ends' connections (trainer/main.cc, python/native): the
// pservers reached over gRPC as launch->connection says, and the options'
// wiring set from them (the heartbeat and fail-over clients, the heartbeat
// interval). The connections must outlive the TrainingSession made from
// launch->options.
std::unique_ptr<PserverConnections> ConnectTrainer(TrainerLaunch* launch);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_FLAGS_GRPC_LAUNCH_H_
