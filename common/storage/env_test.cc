#include "common/storage/env.h"

#include <stdlib.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return tmp_.Path(name); }

  absl::Status WriteString(Env* env, const std::string& path,
                           absl::string_view data) {
    return testing::WriteStringToFile(env, path, data);
  }

  std::string ReadOrDie(const std::string& path) {
    return testing::ReadFileOrFail(env_, path);
  }

  std::vector<std::string> Children(const std::string& dir) {
    std::vector<std::string> c;
    absl::Status s = env_->GetChildren(dir, &c);
    EXPECT_TRUE(s.ok()) << s;
    std::sort(c.begin(), c.end());
    return c;
  }

  Env* env_ = Env::Default();
  testing::ScopedTempDir tmp_{"env_test"};
};

TEST_F(EnvTest, WriteThenRead) {
  ASSERT_TRUE(WriteString(env_, Path("a"), "hello").ok());
  EXPECT_EQ(ReadOrDie(Path("a")), "hello");
  // Rewriting truncates.
  ASSERT_TRUE(WriteString(env_, Path("a"), "hi").ok());
  EXPECT_EQ(ReadOrDie(Path("a")), "hi");
  ASSERT_TRUE(WriteString(env_, Path("empty"), "").ok());
  EXPECT_EQ(ReadOrDie(Path("empty")), "");
}

TEST_F(EnvTest, LargeFileInSeveralAppends) {
  std::string big(10 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  auto f = env_->NewWritableFile(Path("big"));
  ASSERT_TRUE(f.ok()) << f.status();
  for (size_t pos = 0; pos < big.size(); pos += 3 << 20) {
    ASSERT_TRUE((*f)->Append(absl::string_view(big).substr(pos, 3 << 20)).ok());
  }
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE(ReadOrDie(Path("big")) == big);
}

TEST_F(EnvTest, ErrorsNameOperationPathAndErrno) {
  std::string data;
  absl::Status s = env_->ReadFileToString(Path("missing"), &data);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "open " + Path("missing") + ": No such file or directory");

  auto f = env_->NewWritableFile(Path("no/such/dir/file"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.status().message(),
            "open " + Path("no/such/dir/file") + ": No such file or directory");

  s = env_->SyncDir(Path("missing"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  s = env_->DeleteFile(Path("missing"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(),
            "unlink " + Path("missing") + ": No such file or directory");
}

TEST_F(EnvTest, FreeBytesOfTheFileSystemHoldingADirectory) {
  absl::StatusOr<uint64_t> free = env_->FreeBytes(tmp_.path());
  ASSERT_TRUE(free.ok()) << free.status();
  EXPECT_GT(*free, 0u);
  free = env_->FreeBytes(Path("missing"));
  EXPECT_EQ(free.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(free.status().message().find("statvfs"), std::string::npos)
      << free.status();
}

TEST_F(EnvTest, FileExists) {
  EXPECT_TRUE(env_->FileExists(tmp_.path()).ok());
  EXPECT_EQ(env_->FileExists(Path("x")).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteString(env_, Path("x"), "1").ok());
  EXPECT_TRUE(env_->FileExists(Path("x")).ok());
}

TEST_F(EnvTest, CreateDirIsRecursiveAndIdempotent) {
  ASSERT_TRUE(env_->CreateDir(Path("a/b/c")).ok());
  ASSERT_TRUE(env_->CreateDir(Path("a/b/c")).ok());
  ASSERT_TRUE(env_->CreateDir(Path("a/b")).ok());
  EXPECT_EQ(Children(Path("a")), std::vector<std::string>{"b"});
  // Over an existing file: an error naming it.
  ASSERT_TRUE(WriteString(env_, Path("f"), "x").ok());
  absl::Status s = env_->CreateDir(Path("f"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "mkdir " + Path("f") + ": Not a directory");
}

TEST_F(EnvTest, GetChildrenAndDeleteDir) {
  ASSERT_TRUE(env_->CreateDir(Path("t/sub/deeper")).ok());
  ASSERT_TRUE(WriteString(env_, Path("t/f1"), "1").ok());
  ASSERT_TRUE(WriteString(env_, Path("t/sub/f2"), "2").ok());
  ASSERT_TRUE(WriteString(env_, Path("t/sub/deeper/f3"), "3").ok());
  EXPECT_EQ(Children(Path("t")), (std::vector<std::string>{"f1", "sub"}));

  ASSERT_TRUE(env_->DeleteDir(Path("t")).ok());
  EXPECT_EQ(env_->FileExists(Path("t")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(env_->DeleteDir(Path("t")).code(), absl::StatusCode::kNotFound);
  std::vector<std::string> c;
  EXPECT_EQ(env_->GetChildren(Path("t"), &c).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(EnvTest, RenameFilesAndDirectories) {
  ASSERT_TRUE(WriteString(env_, Path("a"), "new").ok());
  ASSERT_TRUE(WriteString(env_, Path("b"), "old").ok());
  ASSERT_TRUE(env_->RenameFile(Path("a"), Path("b")).ok());
  EXPECT_EQ(ReadOrDie(Path("b")), "new");
  EXPECT_EQ(env_->FileExists(Path("a")).code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(env_->CreateDir(Path("d1")).ok());
  ASSERT_TRUE(WriteString(env_, Path("d1/x"), "x").ok());
  ASSERT_TRUE(env_->RenameFile(Path("d1"), Path("d2")).ok());
  EXPECT_EQ(ReadOrDie(Path("d2/x")), "x");
  ASSERT_TRUE(env_->SyncDir(tmp_.path()).ok());

  // A directory never replaces a non-empty one.
  ASSERT_TRUE(env_->CreateDir(Path("d3")).ok());
  ASSERT_TRUE(WriteString(env_, Path("d3/y"), "y").ok());
  absl::Status s = env_->RenameFile(Path("d3"), Path("d2"));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "rename " + Path("d3") + " -> " + Path("d2") +
                             ": Directory not empty");
}

TEST_F(EnvTest, ExchangeSwapsDirectories) {
  ASSERT_TRUE(env_->CreateDir(Path("d1")).ok());
  ASSERT_TRUE(env_->CreateDir(Path("d2")).ok());
  ASSERT_TRUE(WriteString(env_, Path("d1/f"), "one").ok());
  ASSERT_TRUE(WriteString(env_, Path("d2/f"), "two").ok());
  absl::Status s = env_->ExchangeFiles(Path("d1"), Path("d2"));
  if (absl::IsUnimplemented(s)) GTEST_SKIP() << s;
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ReadOrDie(Path("d1/f")), "two");
  EXPECT_EQ(ReadOrDie(Path("d2/f")), "one");
  s = env_->ExchangeFiles(Path("d1"), Path("missing"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardps
