#ifndef SHARDPS_COMMON_LAUNCH_PROCESS_LIMITS_H_
#define SHARDPS_COMMON_LAUNCH_PROCESS_LIMITS_H_

#include <cstdint>
#include <string>

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

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_PROCESS_LIMITS_H_
