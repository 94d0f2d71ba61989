#include "common/storage/fault_injection_env.h"

#include <stdlib.h>

#include <map>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

class FaultInjectionEnvTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return tmp_.Path(name); }

  absl::Status WriteString(Env* env, const std::string& path,
                           absl::string_view data) {
    return testing::WriteStringToFile(env, path, data);
  }

  std::string ReadOrDie(const std::string& path) {
    return testing::ReadFileOrFail(env_, path);
  }

  Env* env_ = Env::Default();
  testing::ScopedTempDir tmp_{"fault_env_test"};
};

TEST_F(FaultInjectionEnvTest, FailNthSyncAndRename) {
  FaultInjectionEnv fenv(env_);
  fenv.FailNth(FaultOp::kSync, 2, absl::DataLossError("disk gone"));
  EXPECT_TRUE(WriteString(&fenv, Path("a"), "1").ok());
  absl::Status s = WriteString(&fenv, Path("b"), "2");
  EXPECT_EQ(s, absl::DataLossError("disk gone"));
  EXPECT_TRUE(WriteString(&fenv, Path("c"), "3").ok());  // one-shot

  fenv.FailNth(FaultOp::kRename, 1, absl::UnavailableError("no rename"));
  EXPECT_EQ(fenv.RenameFile(Path("a"), Path("z")),
            absl::UnavailableError("no rename"));
  EXPECT_TRUE(env_->FileExists(Path("a")).ok());  // nothing was done
  EXPECT_TRUE(fenv.RenameFile(Path("a"), Path("z")).ok());

  fenv.FailNth(FaultOp::kSyncDir, 1, absl::InternalError("x"));
  EXPECT_EQ(fenv.SyncDir(tmp_.path()).code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(fenv.SyncDir(tmp_.path()).ok());
}

TEST_F(FaultInjectionEnvTest, FailedAppendWritesHalf) {
  FaultInjectionEnv fenv(env_);
  fenv.FailNth(FaultOp::kAppend, 2, absl::ResourceExhaustedError("full"));
  auto f = fenv.NewWritableFile(Path("a"));
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append("0123").ok());
  EXPECT_EQ((*f)->Append("456789").code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(ReadOrDie(Path("a")), "0123456");
}

TEST_F(FaultInjectionEnvTest, TornFileDropsBytesSilently) {
  FaultInjectionEnv fenv(env_);
  fenv.TearNextFile("t.bin", 5);
  ASSERT_TRUE(WriteString(&fenv, Path("other.bin"), "0123456789").ok());
  ASSERT_TRUE(WriteString(&fenv, Path("t.bin"), "0123").ok());
  auto f = fenv.NewWritableFile(Path("t2.bin"));  // not torn
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(ReadOrDie(Path("t.bin")), "0123");
  fenv.TearNextFile("t.bin", 5);
  ASSERT_TRUE(WriteString(&fenv, Path("t.bin"), "0123456789").ok());
  EXPECT_EQ(ReadOrDie(Path("t.bin")), "01234");
  EXPECT_EQ(ReadOrDie(Path("other.bin")), "0123456789");
}

TEST_F(FaultInjectionEnvTest, PointsSeeCheckpointOrdinal) {
  FaultInjectionEnv fenv(env_);
  std::vector<std::string> seen;
  for (FaultPoint p :
       {FaultPoint::kMidWrite, FaultPoint::kAfterDataBeforeManifest,
        FaultPoint::kBeforeRename}) {
    fenv.SetPointCallback(p,
                          [&seen, p, this](int ckpt, const std::string& path) {
                            seen.push_back(std::string(FaultPointName(p)) +
                                           " " + std::to_string(ckpt) + " " +
                                           path.substr(tmp_.path().size()));
                            return absl::OkStatus();
                          });
  }
  for (int round = 1; round <= 2; ++round) {
    std::string tmp = Path("ckpt-" + std::to_string(round) + ".tmp");
    ASSERT_TRUE(fenv.CreateDir(tmp).ok());
    ASSERT_TRUE(WriteString(&fenv, JoinPath(tmp, "a"), "aaaa").ok());
    ASSERT_TRUE(WriteString(&fenv, JoinPath(tmp, "b"), "bbbb").ok());
    ASSERT_TRUE(WriteString(&fenv, JoinPath(tmp, "MANIFEST"), "m").ok());
    ASSERT_TRUE(
        fenv.RenameFile(tmp, Path("done" + std::to_string(round))).ok());
  }
  EXPECT_EQ(fenv.checkpoints_started(), 2);
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "mid_write 1 /ckpt-1.tmp/a",
                      "after_data_before_manifest 1 /ckpt-1.tmp/MANIFEST",
                      "before_rename 1 /ckpt-1.tmp",
                      "mid_write 2 /ckpt-2.tmp/a",
                      "after_data_before_manifest 2 /ckpt-2.tmp/MANIFEST",
                      "before_rename 2 /ckpt-2.tmp",
                  }));
  // The mid-write callback ran with half of "aaaa" written.
  EXPECT_EQ(ReadOrDie(Path("done1/a")), "aaaa");
}

TEST_F(FaultInjectionEnvTest, PointErrorFailsTheOperation) {
  FaultInjectionEnv fenv(env_);
  fenv.SetPointCallback(FaultPoint::kMidWrite, [](int, const std::string&) {
    return absl::AbortedError("stop");
  });
  ASSERT_TRUE(fenv.CreateDir(Path("ckpt-1.tmp")).ok());
  EXPECT_EQ(WriteString(&fenv, Path("ckpt-1.tmp/a"), "abcdef"),
            absl::AbortedError("stop"));
  EXPECT_EQ(ReadOrDie(Path("ckpt-1.tmp/a")), "abc");
  fenv.SetPointCallback(FaultPoint::kMidWrite, nullptr);
}

// --- SHARDPS_TEST_CHECKPOINT_FAULT ---

TEST(CheckpointFaultSpecTest, ParsesValidSpecs) {
  auto s = ParseCheckpointFaultSpec("crash_mid_write:2");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->crash);
  EXPECT_EQ(s->point, FaultPoint::kMidWrite);
  EXPECT_EQ(s->n, 2);

  s = ParseCheckpointFaultSpec("crash_after_data_before_manifest:1");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->point, FaultPoint::kAfterDataBeforeManifest);
  s = ParseCheckpointFaultSpec("crash_before_rename:10");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->point, FaultPoint::kBeforeRename);
  EXPECT_EQ(s->n, 10);

  const std::map<std::string, FaultOp> ops = {
      {"fail_append:3", FaultOp::kAppend},
      {"fail_sync:1", FaultOp::kSync},
      {"fail_rename:4", FaultOp::kRename},
      {"fail_sync_dir:5", FaultOp::kSyncDir}};
  for (const auto& [text, op] : ops) {
    s = ParseCheckpointFaultSpec(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    EXPECT_FALSE(s->crash);
    EXPECT_EQ(s->op, op) << text;
  }
}

TEST(CheckpointFaultSpecTest, RejectsInvalidSpecsClearly) {
  const std::map<std::string, std::string> cases = {
      {"crash_mid_write", "no \":<N>\""},
      {"crash_mid_write:0", "N \"0\" is not an integer >= 1"},
      {"crash_mid_write:-1", "N \"-1\" is not an integer >= 1"},
      {"crash_mid_write:two", "N \"two\" is not an integer >= 1"},
      {"crash_mid_write:", "N \"\" is not an integer >= 1"},
      {"crash_mid_wrte:2", "unknown fault \"crash_mid_wrte\""},
      {":1", "unknown fault \"\""},
  };
  for (const auto& [text, why] : cases) {
    auto s = ParseCheckpointFaultSpec(text);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(s.status().message(),
              "SHARDPS_TEST_CHECKPOINT_FAULT=\"" + text + "\": " + why +
                  "; expected <fault>:<N> with N >= 1 and <fault> one of "
                  "crash_mid_write, crash_after_data_before_manifest, "
                  "crash_before_rename, fail_append, fail_sync, "
                  "fail_rename, fail_sync_dir");
  }
}

TEST(CheckpointFaultSpecTest, FromEnvironment) {
  auto getenv_with = [](const char* value) {
    return [value](const char* name) -> const char* {
      return std::string(name) == kCheckpointFaultEnvVar ? value : nullptr;
    };
  };
  auto e =
      CheckpointFaultEnvFromEnvironment(Env::Default(), getenv_with(nullptr));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, nullptr);
  e = CheckpointFaultEnvFromEnvironment(Env::Default(), getenv_with(""));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, nullptr);
  e = CheckpointFaultEnvFromEnvironment(Env::Default(),
                                        getenv_with("fail_sync:1"));
  ASSERT_TRUE(e.ok());
  EXPECT_NE(*e, nullptr);
  e = CheckpointFaultEnvFromEnvironment(Env::Default(), getenv_with("boom"));
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
