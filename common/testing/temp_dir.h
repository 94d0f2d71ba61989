// Test helpers for code that writes files: a fresh temporary directory that
// goes away with the test, and whole-file writes and reads through an Env.
// Header-only; tests only.
#ifndef SHARDPS_COMMON_TESTING_TEMP_DIR_H_
#define SHARDPS_COMMON_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/storage/env.h"
#include "gtest/gtest.h"

namespace shardps {
namespace testing {

// A new directory under the test's temporary directory, named
// <prefix>.XXXXXX, removed with everything under it by the destructor.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix) {
    std::string templ = JoinPath(::testing::TempDir(), prefix + ".XXXXXX");
    if (mkdtemp(templ.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << templ << " failed";
      return;
    }
    path_ = templ;
  }
  ~ScopedTempDir() {
    if (!path_.empty()) Env::Default()->DeleteDir(path_).IgnoreError();
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string Path(absl::string_view name) const {
    return JoinPath(path_, name);
  }

 private:
  std::string path_;
};

// Writes `data` to `path` through `env`, synced and closed.
inline absl::Status WriteStringToFile(Env* env, const std::string& path,
                                      absl::string_view data) {
  absl::StatusOr<std::unique_ptr<WritableFile>> f = env->NewWritableFile(path);
  if (!f.ok()) return f.status();
  absl::Status s = (*f)->Append(data);
  if (s.ok()) s = (*f)->Sync();
  absl::Status c = (*f)->Close();
  return s.ok() ? c : s;
}

// The whole file at `path`, read through `env`; a test failure if it cannot
// be read.
inline std::string ReadFileOrFail(Env* env, const std::string& path) {
  std::string data;
  absl::Status s = env->ReadFileToString(path, &data);
  EXPECT_TRUE(s.ok()) << s;
  return data;
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_COMMON_TESTING_TEMP_DIR_H_
