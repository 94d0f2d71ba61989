#include "common/launch/process_limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {
namespace {

uint64_t Value(rlim_t v) {
  return v == RLIM_INFINITY ? std::numeric_limits<uint64_t>::max()
                            : static_cast<uint64_t>(v);
}

std::string Text(uint64_t v) {
  return v == std::numeric_limits<uint64_t>::max() ? "unlimited"
                                                   : absl::StrCat(v);
}

}  // namespace

OpenFileLimit RaiseOpenFileLimit() {
  OpenFileLimit out;
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) {
    out.error = absl::StrCat("getrlimit: ", std::strerror(errno));
    return out;
  }
  out.before = out.now = Value(r.rlim_cur);
  out.hard = Value(r.rlim_max);
  if (r.rlim_cur == r.rlim_max) return out;
  struct rlimit raised = r;
  raised.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    out.error = absl::StrCat("setrlimit: ", std::strerror(errno));
    return out;
  }
  out.now = out.hard;
  return out;
}

std::string DescribeOpenFileLimit(const OpenFileLimit& l) {
  if (!l.error.empty()) {
    return absl::StrCat("open files: ", Text(l.before),
                        " (could not raise it: ", l.error, ")");
  }
  if (l.before == l.now) {
    return absl::StrCat("open files: ", Text(l.now), " (the hard limit)");
  }
  return absl::StrCat("open files: ", Text(l.before), " -> ", Text(l.now),
                      " (raised to the hard limit)");
}

void LogOpenFileLimit(const OpenFileLimit& l) {
  if (l.error.empty()) {
    LOG(INFO) << DescribeOpenFileLimit(l);
  } else {
    LOG(WARNING) << DescribeOpenFileLimit(l);
  }
}

absl::Status CheckAddressSpace(uint64_t needed, absl::string_view what) {
  struct rlimit r;
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) {
    return absl::OkStatus();
  }
  const uint64_t limit = Value(r.rlim_cur);
  uint64_t mapped = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) {
      mapped = std::strtoull(line.c_str() + 7, nullptr, 10) << 10;  // kB
      break;
    }
  }
  if (mapped < limit && limit - mapped >= needed) return absl::OkStatus();
  const auto mib = [](uint64_t b) { return b >> 20; };
  return absl::FailedPreconditionError(absl::StrCat(
      "the address-space limit (ulimit -v, RLIMIT_AS) is ", mib(limit),
      " MiB and ", mib(mapped),
      " MiB are mapped already (thread stacks and "
      "allocator arenas, most of them never touched); beyond that it needs ",
      what,
      ", and gRPC aborts the process when an allocation fails under the "
      "limit. Remove the limit (bound memory with --max_memory_mb or a "
      "cgroup) or raise it to at least ",
      mib(mapped + needed) + 1, " MiB"));
}

}  // namespace shardps
