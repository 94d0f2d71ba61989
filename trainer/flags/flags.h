#ifndef SHARDPS_TRAINER_FLAGS_FLAGS_H_
#define SHARDPS_TRAINER_FLAGS_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/launch/flag_help.h"
#include "common/launch/flags.h"
#include "common/transport/transport_security.h"
#include "trainer/core/options.h"
#include "trainer/transport/connection_options.h"

namespace shardps {

// The trainer's flags (defined in flags.cc; docs/flags.md), read once after
// ParseFlagsWithEnv. Every bad value is INVALID_ARGUMENT with one line
// naming the flag, the scheduler variable or the file.

// The typed options of a run; the trainer id and count come from the
// scheduler's variables (`env`) when the flags do not give them. Leaves
// incarnation and the wiring fields at their defaults.
// Where the model comes from: --config (the trainer binary), or the caller
// (a Python job: --config is then refused, and options.config stays empty).
enum class ModelSource { kConfig, kCaller };
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags(
    const GetEnvFn& env, ModelSource model = ModelSource::kConfig);

// How the trainer reaches the pservers.
absl::StatusOr<ConnectionOptions> ConnectionOptionsFromFlags();

// The trainer's own flags as --help groups, in the order --help shows
// them (main.cc adds the security and monitoring groups).
std::vector<FlagGroup> TrainerFlagGroups();

// Both front ends' start (trainer/main.cc, python/native): the flags of
// `argv` and the environment parsed (ParseFlagsWithEnv; then TF_CONFIG's
// and PADDLE_INIT_*'s aliases, the lowest-precedence defaults), the
// options and the connection read from them, and a new incarnation.
// INVALID_ARGUMENT, one line naming the flag, for a bad value or an
// argument that is no flag.
struct TrainerLaunch {
  TrainerOptions options;
  ConnectionOptions connection;
};
absl::StatusOr<TrainerLaunch> ParseTrainerFlags(int* argc, char*** argv,
                                                const GetEnvFn& env,
                                                ModelSource model);

// 64 random bits, never 0: a restarted trainer is told apart from its
// previous process (TrainerOptions::incarnation).
uint64_t NewIncarnation();

// The model config of --config (protobuf text format).
absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_FLAGS_FLAGS_H_
