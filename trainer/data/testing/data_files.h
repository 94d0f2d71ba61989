// Test helper for the data readers: writes a data file as a user would
// hand it over, plain or gzip-compressed. Header-only; tests only.
#ifndef SHARDPS_TRAINER_DATA_TESTING_DATA_FILES_H_
#define SHARDPS_TRAINER_DATA_TESTING_DATA_FILES_H_

#include <zlib.h>

#include <string>

#include "absl/strings/string_view.h"
#include "common/storage/env.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace testing {

// Writes `contents` to `path`, gzip-compressed when `gzip`; a test failure
// if it cannot.
inline void WriteDataFile(const std::string& path, absl::string_view contents,
                          bool gzip) {
  if (!gzip) {
    absl::Status s = WriteStringToFile(Env::Default(), path, contents);
    EXPECT_TRUE(s.ok()) << s;
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << "gzopen " << path;
  EXPECT_EQ(gzwrite(f, contents.data(), static_cast<unsigned>(contents.size())),
            static_cast<int>(contents.size()));
  EXPECT_EQ(gzclose(f), Z_OK);
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_TESTING_DATA_FILES_H_
