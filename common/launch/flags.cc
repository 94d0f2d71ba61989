#include "common/launch/flags.h"

#include <cstdlib>
#include <iostream>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"

extern char** environ;

namespace shardps {

GetEnvFn ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

std::string EnvVarForFlag(const std::string& name) {
  return absl::StrCat("SHARDPS_", absl::AsciiStrToUpper(name));
}

namespace {

// Checks every flag on the command line `argv` (unknown, missing its value,
// or a bad value) and collects the names it sets into *on_command_line.
absl::Status CheckCommandLine(int argc, char** argv,
                              std::set<std::string>* on_command_line) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = name.find('=');
    std::optional<std::string> value;
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) {
      gflags::CommandLineFlagInfo negated;
      if (absl::StartsWith(name, "no") && !value.has_value() &&
          gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &negated) &&
          negated.type == "bool") {
        on_command_line->insert(name.substr(2));
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    on_command_line->insert(name);
    if (!value.has_value() && info.type != "bool") {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " is missing its value"));
      }
      value = argv[i + 1];
    }
    if (value.has_value() && name != "flagfile" && name != "fromenv" &&
        name != "tryfromenv") {
      gflags::FlagSaver restore;  // only checking the value here
      if (gflags::SetCommandLineOption(name.c_str(), value->c_str()).empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", name, "=", *value, ": not a valid ", info.type, " value"));
      }
    }
  }
  return absl::OkStatus();
}

// Sets each flag not in `on_command_line` from its SHARDPS_<FLAG> variable
// in `env`, if set, and collects every flag's variable into *known_vars.
absl::Status ApplyEnvToFlags(const GetEnvFn& env,
                             const std::set<std::string>& on_command_line,
                             std::set<std::string>* known_vars) {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);
  for (const auto& f : flags) {
    const std::string var = EnvVarForFlag(f.name);
    known_vars->insert(var);
    if (on_command_line.count(f.name)) continue;
    const char* value = env(var.c_str());
    if (value == nullptr) continue;
    if (gflags::SetCommandLineOption(f.name.c_str(), value).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(var, "=", value, ": not a valid value for --", f.name,
                       " (", f.type, ")"));
    }
  }
  return absl::OkStatus();
}

// Warns on stderr of each SHARDPS_ variable of the process environment
// that is not in `known_vars` (test hooks aside).
void WarnOfUnknownEnvVars(const std::set<std::string>& known_vars) {
  if (environ == nullptr) return;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (!absl::StartsWith(kv, "SHARDPS_")) continue;
    // Test hooks (e.g. SHARDPS_TEST_CHECKPOINT_FAULT) are not flags.
    if (absl::StartsWith(kv, "SHARDPS_TEST_")) continue;
    const std::string var = kv.substr(0, kv.find('='));
    if (!known_vars.count(var)) {
      std::cerr << "warning: " << var
                << " names no flag of this program; ignored\n";
    }
  }
}

}  // namespace

absl::Status ParseFlagsWithEnv(int* argc, char*** argv, const GetEnvFn& env) {
  // Which flags does the command line set? Parse a copy first, without
  // removing anything, so that the environment fills in only the others.
  // Check every flag on the command line here, so that an unknown flag or a
  // bad value gets one line and exit status 2 (gflags would exit 1 itself).
  std::set<std::string> on_command_line;
  if (absl::Status s = CheckCommandLine(*argc, *argv, &on_command_line);
      !s.ok()) {
    return s;
  }
  std::set<std::string> known_vars;
  if (absl::Status s = ApplyEnvToFlags(env, on_command_line, &known_vars);
      !s.ok()) {
    return s;
  }
  WarnOfUnknownEnvVars(known_vars);
  gflags::ParseCommandLineFlags(argc, argv, /*remove_flags=*/true);
  return absl::OkStatus();
}

bool FlagWasSet(const std::string& name) {
  gflags::CommandLineFlagInfo info;
  if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) return false;
  return !info.is_default;
}

absl::Status DetectSchedulerRank(const GetEnvFn& env, SchedulerRank* out) {
  struct Pair {
    const char* rank;
    const char* size;
  };
  static constexpr Pair kPairs[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      // torchrun, and Kubeflow's PyTorchJob.
      {"RANK", "WORLD_SIZE"},
      {"JOB_COMPLETION_INDEX", nullptr},
  };
  *out = SchedulerRank{};
  for (const Pair& p : kPairs) {
    const char* r = env(p.rank);
    if (r == nullptr) continue;
    int rank = 0;
    if (!absl::SimpleAtoi(r, &rank) || rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.rank, "=", r, " is not a non-negative integer"));
    }
    out->rank = rank;
    out->source = p.rank;
    if (p.size != nullptr) {
      if (const char* s = env(p.size)) {
        int size = 0;
        if (!absl::SimpleAtoi(s, &size) || size <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(p.size, "=", s, " is not a positive integer"));
        }
        out->size = size;
        absl::StrAppend(&out->source, "/", p.size);
      }
    }
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status DetectLocalRank(const GetEnvFn& env, int* local_rank) {
  *local_rank = 0;
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* v = env(name);
    if (v == nullptr) continue;
    if (!absl::SimpleAtoi(v, local_rank) || *local_rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", v, " is not a non-negative integer"));
    }
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace shardps
