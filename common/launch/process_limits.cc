#include "common/launch/process_limits.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
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

}  // namespace shardps
