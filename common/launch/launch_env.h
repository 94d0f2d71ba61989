#ifndef SHARDPS_COMMON_LAUNCH_LAUNCH_ENV_H_
#define SHARDPS_COMMON_LAUNCH_LAUNCH_ENV_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/launch/flags.h"

namespace shardps {

// The launch variables of other parameter servers, read so that jobs move
// over without rewriting their launch scripts (docs/deploy.md):
//
// Kubeflow's TF_CONFIG, {"cluster": {"chief": [...], "worker": [...],
// "ps": ["host:port", ...]}, "task": {"type": "worker", "index": 1}}:
//   trainer: --pservers from cluster.ps; its id is the task's place among
//     chief then workers, the count their number (see TfConfigRank).
//   pserver (task type "ps"): --port from its own cluster.ps entry, and
//     --num_gradient_servers the number of chief and workers.
// PaddlePaddle v1's cluster guide, PADDLE_INIT_*:
//   PADDLE_INIT_PSERVERS (IPs, comma-separated) with PADDLE_INIT_PORT:
//     the trainer's --pservers; PADDLE_INIT_PORT: the pserver's --port;
//   PADDLE_INIT_NUM_GRADIENT_SERVERS: --num_gradient_servers (pserver), the
//     trainer count (trainer); PADDLE_INIT_TRAINER_ID: the trainer id;
//   PADDLE_INIT_USE_GPU: --use_gpu; PADDLE_INIT_TRAINER_COUNT (threads or
//     GPUs per trainer): --num_threads.
//
// They are the lowest-precedence source: a flag on the command line, a
// SHARDPS_<FLAG> variable, and for the trainer id and count an MPI, Slurm
// or Kubernetes variable, each wins over them.

// A flag's value from a launch variable.
struct FlagAlias {
  std::string flag;
  std::string value;
  std::string source;  // the variable, for messages
};

enum class LaunchRole { kPserver, kTrainer };

// The flag values the launch variables give `role` (not the trainer id
// and count: see LaunchRank). INVALID_ARGUMENT naming the variable when one
// cannot be read (TF_CONFIG that is not JSON, a port that is no number).
absl::StatusOr<std::vector<FlagAlias>> LaunchAliases(const GetEnvFn& env,
                                                     LaunchRole role);

// A trainer id and count from TF_CONFIG or PADDLE_INIT_TRAINER_ID and
// PADDLE_INIT_NUM_GRADIENT_SERVERS; no rank when neither is set.
absl::Status LaunchRank(const GetEnvFn& env, SchedulerRank* out);

// Applies `aliases` to the flags that neither the command line nor a
// SHARDPS_ variable set; call after ParseFlagsWithEnv. INVALID_ARGUMENT
// naming the variable for a value the flag does not take.
absl::Status ApplyFlagAliases(const std::vector<FlagAlias>& aliases);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_LAUNCH_ENV_H_
