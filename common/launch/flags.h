#ifndef SHARDPS_COMMON_LAUNCH_FLAGS_H_
#define SHARDPS_COMMON_LAUNCH_FLAGS_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace shardps {

// Reads an environment variable; returns nullptr when unset. Injected so
// tests need not touch the process environment.
using GetEnvFn = std::function<const char*(const char* name)>;
GetEnvFn ProcessEnv();

// The environment variable that carries flag `name`: SHARDPS_<NAME>.
std::string EnvVarForFlag(const std::string& name);

// Parses the command line with gflags, after first applying SHARDPS_<FLAG>
// environment variables to every flag that was not given on the command
// line (precedence: command line, then environment, then default). A bad
// value in the environment is an error naming the variable; an unknown
// SHARDPS_ variable is reported on stderr and ignored. Removes the flags
// from argv as gflags does.
absl::Status ParseFlagsWithEnv(int* argc, char*** argv, const GetEnvFn& env);

// True when the flag was set on the command line or from the environment.
bool FlagWasSet(const std::string& name);

// A rank and size from a job scheduler or MPI launcher, tried in order:
// OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH, Intel
// MPI), SLURM_PROCID/SLURM_NTASKS (Slurm), RANK/WORLD_SIZE (torchrun,
// Kubeflow's PyTorchJob), JOB_COMPLETION_INDEX (Kubernetes indexed Jobs; no
// size variable).
struct SchedulerRank {
  std::optional<int> rank;
  std::optional<int> size;
  std::string source;  // which variables, for messages
};
// An unparsable value is an error naming the variable.
absl::Status DetectSchedulerRank(const GetEnvFn& env, SchedulerRank* out);

// This process's rank among those of its node, for picking a GPU:
// OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), then SLURM_LOCALID (Slurm), then
// LOCAL_RANK (torchrun); 0 when none is set. An unparsable value is an error
// naming the variable.
absl::Status DetectLocalRank(const GetEnvFn& env, int* local_rank);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_FLAGS_H_
