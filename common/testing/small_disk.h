// A test helper for full-disk paths: a tmpfs of a few bytes mounted at a
// directory for the test's length. Header-only; tests only.
#ifndef SHARDPS_COMMON_TESTING_SMALL_DISK_H_
#define SHARDPS_COMMON_TESTING_SMALL_DISK_H_

#include <sys/mount.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardps {
namespace testing {

// A tmpfs of `bytes` at `dir` (made if missing), unmounted by the
// destructor. Needs CAP_SYS_ADMIN (CI runs the suite as root): a test
// failure, naming why, without it.
class SmallDisk {
 public:
  SmallDisk(const std::string& dir, int64_t bytes) : dir_(dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string opts = absl::StrCat("size=", bytes);
    if (mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      ADD_FAILURE() << "mounting a tmpfs at " << dir
                    << " failed: " << std::strerror(errno)
                    << " (a full-disk test needs root)";
      return;
    }
    mounted_ = true;
  }
  ~SmallDisk() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  SmallDisk(const SmallDisk&) = delete;
  SmallDisk& operator=(const SmallDisk&) = delete;

  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_COMMON_TESTING_SMALL_DISK_H_
