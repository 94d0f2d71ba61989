#ifndef SHARDPS_COMMON_LAUNCH_PROCESS_LIMITS_H_
#define SHARDPS_COMMON_LAUNCH_PROCESS_LIMITS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardps {

// The open-file limit before and after RaiseOpenFileLimit.
struct OpenFileLimit {
  uint64_t before = 0;  // the soft limit the process started with
  uint64_t now = 0;     // the soft limit it has
  uint64_t hard = 0;    // the hard limit (RLIM_INFINITY as UINT64_MAX)
  std::string error;    // why it could not be read or raised; empty if none
  // Connections one address may hold (the pserver's accept guard); 0: not
  // capped.
  int per_address = 0;
};

// Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit,
// as servers do (etcd, nginx's worker_rlimit_nofile): systemd and most
// shells start processes at 1,024, which idle connections alone exhaust
// (issue 34's audit), while the hard limit is often 524,288. Call once at
// the start of main(); log what it returns (LogOpenFileLimit).
OpenFileLimit RaiseOpenFileLimit();

// "open files: 1024 -> 524288 (raised to the hard limit)", or what went
// wrong.
std::string DescribeOpenFileLimit(const OpenFileLimit& l);
// Logs that: INFO, or WARNING when the limit could not be raised.
void LogOpenFileLimit(const OpenFileLimit& l);

// Whether the address-space limit (RLIMIT_AS, `ulimit -v`) leaves `needed`
// bytes beyond what the process has mapped now (VmSize): OK without a
// limit; FAILED_PRECONDITION naming both figures and what to do when it
// does not. gRPC aborts the process when an allocation fails (issue 34's
// audit: one 60 MiB push under `prlimit --as=1G` ended a pserver with
// SIGSEGV), so a limit without room ends the server at its first large
// request instead of refusing that request. `what` names the need in the
// message ("--max_memory_mb (64 MiB) and 1024 MiB for gRPC").
absl::Status CheckAddressSpace(uint64_t needed, absl::string_view what);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_PROCESS_LIMITS_H_
