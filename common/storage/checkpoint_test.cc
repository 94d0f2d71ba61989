#include "common/storage/checkpoint.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/storage/fault_injection_env.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

class CheckpointTest : public ::testing::Test {
 protected:
  // Blobs whose content depends on the step, so a load of the wrong
  // checkpoint shows.
  static std::vector<CheckpointFile> Files(int64_t step) {
    std::string big(100000, '\0');
    for (size_t i = 0; i < big.size(); ++i) {
      big[i] = static_cast<char>(i * 31 + step);
    }
    return {{"table_0.bin", "dense-" + std::to_string(step)},
            {"table_1.bin", big},
            {"empty.bin", ""}};
  }
  static std::string Meta(int64_t step) {
    return std::string("meta\0\n ", 7) + std::to_string(step);
  }

  absl::Status WriteStep(CheckpointWriter* w, int64_t step) {
    return w->Write(step, Meta(step), Files(step));
  }

  void ExpectStep(const absl::StatusOr<LoadedCheckpoint>& c, int64_t step) {
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->step, step);
    EXPECT_EQ(c->metadata, Meta(step));
    std::vector<CheckpointFile> want = Files(step);
    ASSERT_EQ(c->files.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(c->files[i].name, want[i].name);
      EXPECT_TRUE(c->files[i].data == want[i].data) << want[i].name;
    }
  }

  std::vector<int64_t> Complete() {
    auto steps = CheckpointReader(env_, root_).ListComplete();
    EXPECT_TRUE(steps.ok()) << steps.status();
    return steps.ok() ? *steps : std::vector<int64_t>{};
  }

  std::vector<std::string> RootChildren() {
    std::vector<std::string> c;
    absl::Status s = env_->GetChildren(root_, &c);
    EXPECT_TRUE(s.ok()) << s;
    std::sort(c.begin(), c.end());
    return c;
  }

  std::string StepPath(int64_t step, const std::string& name) {
    return JoinPath(JoinPath(root_, CheckpointDirName(step)), name);
  }

  // Rewrites a file with `edit` applied to its content.
  void Edit(const std::string& path,
            const std::function<void(std::string*)>& edit) {
    std::string data;
    ASSERT_TRUE(env_->ReadFileToString(path, &data).ok());
    edit(&data);
    auto f = env_->NewWritableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(data).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }

  Env* env_ = Env::Default();
  testing::ScopedTempDir tmp_{"checkpoint_test"};
  const std::string root_ = tmp_.Path("ckpts");
};

TEST_F(CheckpointTest, DirName) {
  EXPECT_EQ(CheckpointDirName(0), "ckpt-000000000000");
  EXPECT_EQ(CheckpointDirName(200), "ckpt-000000000200");
  EXPECT_EQ(CheckpointDirName(kMaxCheckpointStep), "ckpt-999999999999");
}

TEST_F(CheckpointTest, RoundTrip) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  CheckpointReader r(env_, root_);
  ExpectStep(r.Load(100), 100);
  ExpectStep(r.LoadNewest(), 100);
  EXPECT_EQ(Complete(), std::vector<int64_t>{100});
  EXPECT_EQ(RootChildren(), std::vector<std::string>{"ckpt-000000000100"});
}

TEST_F(CheckpointTest, EmptyMetadataNoFilesAndViews) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(w.Write(0, "", {}).ok());
  auto c = CheckpointReader(env_, root_).Load(0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata, "");
  EXPECT_TRUE(c->files.empty());

  const std::string blob = "borrowed bytes";
  const CheckpointFileView views[] = {{"v.bin", blob}};
  ASSERT_TRUE(w.WriteViews(1, "m", views).ok());
  c = CheckpointReader(env_, root_).Load(1);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->files.size(), 1u);
  EXPECT_EQ(c->files[0].data, blob);
}

TEST_F(CheckpointTest, KeepsTheNewestTwo) {
  CheckpointWriter w(env_, root_, /*keep=*/2);
  for (int64_t step : {100, 200, 300, 400}) {
    ASSERT_TRUE(WriteStep(&w, step).ok());
  }
  EXPECT_EQ(Complete(), (std::vector<int64_t>{300, 400}));
  EXPECT_EQ(RootChildren(), (std::vector<std::string>{"ckpt-000000000300",
                                                      "ckpt-000000000400"}));
  CheckpointReader r(env_, root_);
  ExpectStep(r.Load(300), 300);
  EXPECT_EQ(r.Load(200).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, KeepOne) {
  CheckpointWriter w(env_, root_, /*keep=*/1);
  ASSERT_TRUE(WriteStep(&w, 1).ok());
  ASSERT_TRUE(WriteStep(&w, 2).ok());
  EXPECT_EQ(Complete(), std::vector<int64_t>{2});
}

TEST_F(CheckpointTest, LargerStepsFromAnEarlierRunAreLeftAlone) {
  CheckpointWriter w(env_, root_, /*keep=*/2);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  ASSERT_TRUE(WriteStep(&w, 300).ok());
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  EXPECT_EQ(Complete(), (std::vector<int64_t>{100, 200, 300}));
  ASSERT_TRUE(WriteStep(&w, 250).ok());
  EXPECT_EQ(Complete(), (std::vector<int64_t>{200, 250, 300}));
}

TEST_F(CheckpointTest, RewritingAStepReplacesIt) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  ASSERT_TRUE(w.Write(100, "second", {{"only.bin", "new"}}).ok());
  auto c = CheckpointReader(env_, root_).Load(100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata, "second");
  ASSERT_EQ(c->files.size(), 1u);
  EXPECT_EQ(c->files[0].data, "new");
  EXPECT_EQ(RootChildren(), std::vector<std::string>{"ckpt-000000000100"});
}

TEST_F(CheckpointTest, BadArguments) {
  CheckpointWriter w(env_, root_);
  const std::vector<std::pair<std::string, std::string>> bad_names = {
      {"",
       "bad checkpoint file name \"\": must be 1-255 characters, not "
       "start with '.', not be MANIFEST"},
      {"MANIFEST",
       "bad checkpoint file name \"MANIFEST\": must be 1-255 "
       "characters, not start with '.', not be MANIFEST"},
      {".hidden",
       "bad checkpoint file name \".hidden\": must be 1-255 "
       "characters, not start with '.', not be MANIFEST"},
      {"a/b",
       "bad checkpoint file name \"a/b\": only letters, digits, "
       "'.', '_' and '-' are allowed"},
      {"a b",
       "bad checkpoint file name \"a b\": only letters, digits, "
       "'.', '_' and '-' are allowed"},
  };
  for (const auto& [name, message] : bad_names) {
    absl::Status s = w.Write(1, "", {{name, "x"}});
    EXPECT_EQ(s, absl::InvalidArgumentError(message)) << name;
  }
  EXPECT_EQ(
      w.Write(1, "", {{"a", "x"}, {"a", "y"}}),
      absl::InvalidArgumentError("checkpoint file name \"a\" appears twice"));
  EXPECT_EQ(w.Write(-1, "", {}),
            absl::InvalidArgumentError(
                "checkpoint step -1 is outside [0, 999999999999]"));
  EXPECT_EQ(w.Write(kMaxCheckpointStep + 1, "", {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckpointReader(env_, root_).Load(-5).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing was created.
  EXPECT_EQ(env_->FileExists(root_).code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointTest, NothingThere) {
  CheckpointReader r(env_, root_);  // root does not exist
  EXPECT_EQ(Complete(), std::vector<int64_t>{});
  auto c = r.LoadNewest();
  EXPECT_EQ(c.status(),
            absl::NotFoundError("no complete checkpoint in " + root_));
  c = r.Load(7);
  EXPECT_EQ(c.status(),
            absl::NotFoundError("no checkpoint of step 7: " + root_ +
                                "/ckpt-000000000007 is missing"));
}

TEST_F(CheckpointTest, FlippedDataByteIsDataLossAndNewestFallsBack) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  const std::string path = StepPath(200, "table_1.bin");
  Edit(path, [](std::string* d) { (*d)[5000] ^= 0x01; });

  CheckpointReader r(env_, root_);
  auto c = r.Load(200);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(c.status().message(), path + ": crc32 0x"))
      << c.status();
  EXPECT_TRUE(absl::StrContains(c.status().message(), " != manifest 0x"))
      << c.status();
  ExpectStep(r.LoadNewest(), 100);
  // The manifest is intact, so the directory still lists as complete.
  EXPECT_EQ(Complete(), (std::vector<int64_t>{100, 200}));
}

TEST_F(CheckpointTest, FlippedManifestByteIsDataLoss) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  const std::string path = StepPath(200, "MANIFEST");
  // A byte of the step line: "step 200" becomes "step 201".
  Edit(path, [](std::string* d) {
    size_t pos = d->find("step 200");
    ASSERT_NE(pos, std::string::npos);
    (*d)[pos + 7] = '1';
  });
  CheckpointReader r(env_, root_);
  auto c = r.Load(200);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(c.status().message(), path + ": checksum 0x"))
      << c.status();
  EXPECT_EQ(Complete(), std::vector<int64_t>{100});
  ExpectStep(r.LoadNewest(), 100);
}

TEST_F(CheckpointTest, TruncatedManifest) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  const std::string path = StepPath(100, "MANIFEST");
  Edit(path, [](std::string* d) { d->resize(d->size() - 3); });
  auto c = CheckpointReader(env_, root_).Load(100);
  EXPECT_EQ(c.status(),
            absl::DataLossError(path + ": truncated (no final newline)"));
  Edit(path, [](std::string* d) { d->resize(d->rfind("file ")); });
  c = CheckpointReader(env_, root_).Load(100);
  EXPECT_EQ(c.status(),
            absl::DataLossError(
                path + ": last line is not \"checksum <crc32>\" (truncated?)"));
  EXPECT_EQ(Complete(), std::vector<int64_t>{});
}

TEST_F(CheckpointTest, TruncatedDataFile) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  const std::string path = StepPath(200, "table_1.bin");
  Edit(path, [](std::string* d) { d->resize(4096); });
  CheckpointReader r(env_, root_);
  EXPECT_EQ(r.Load(200).status(),
            absl::DataLossError(path + ": size 4096 != manifest 100000"));
  ExpectStep(r.LoadNewest(), 100);
}

TEST_F(CheckpointTest, MissingDataFileAndMissingManifest) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  ASSERT_TRUE(WriteStep(&w, 300).ok());
  ASSERT_TRUE(env_->DeleteFile(StepPath(300, "table_0.bin")).ok());
  ASSERT_TRUE(env_->DeleteFile(StepPath(200, "MANIFEST")).ok());
  CheckpointReader r(env_, root_);
  EXPECT_EQ(r.Load(300).status(),
            absl::DataLossError(StepPath(300, "table_0.bin") +
                                ": missing (listed in the manifest)"));
  EXPECT_EQ(r.Load(200).status(),
            absl::DataLossError(StepPath(200, "MANIFEST") + ": missing"));
  EXPECT_EQ(Complete(), (std::vector<int64_t>{300}));
}

TEST_F(CheckpointTest, LeftoverTmpIsIgnoredAndCleanedByNextWrite) {
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  // A crash's leftover: a whole copy of a valid checkpoint, but still .tmp,
  // plus an empty one.
  ASSERT_TRUE(WriteStep(&w, 500).ok());
  ASSERT_TRUE(env_->RenameFile(JoinPath(root_, "ckpt-000000000500"),
                               JoinPath(root_, "ckpt-000000000500.tmp"))
                  .ok());
  ASSERT_TRUE(env_->CreateDir(JoinPath(root_, "ckpt-000000000600.tmp")).ok());
  CheckpointReader r(env_, root_);
  EXPECT_EQ(Complete(), std::vector<int64_t>{100});
  ExpectStep(r.LoadNewest(), 100);
  EXPECT_EQ(r.Load(500).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(WriteStep(&w, 200).ok());
  EXPECT_EQ(RootChildren(), (std::vector<std::string>{"ckpt-000000000100",
                                                      "ckpt-000000000200"}));
}

TEST_F(CheckpointTest, UnrelatedEntriesAreLeftAlone) {
  ASSERT_TRUE(env_->CreateDir(JoinPath(root_, "notes")).ok());
  ASSERT_TRUE(env_->CreateDir(JoinPath(root_, "ckpt-12")).ok());
  CheckpointWriter w(env_, root_, /*keep=*/1);
  ASSERT_TRUE(WriteStep(&w, 1).ok());
  ASSERT_TRUE(WriteStep(&w, 2).ok());
  EXPECT_EQ(RootChildren(), (std::vector<std::string>{"ckpt-000000000002",
                                                      "ckpt-12", "notes"}));
}

// --- Faults: a failed or interrupted write leaves the previous checkpoint
// loadable and the failed one invisible. ---

struct FaultCase {
  std::string name;
  std::function<void(FaultInjectionEnv*)> arm;
  absl::Status want;  // what Write(200) returns
};

class CheckpointFaultTest : public CheckpointTest,
                            public ::testing::WithParamInterface<FaultCase> {};

absl::Status Point(FaultInjectionEnv* e, FaultPoint p) {
  e->SetPointCallback(p, [p](int, const std::string&) {
    return absl::AbortedError(std::string(FaultPointName(p)));
  });
  return absl::OkStatus();
}

TEST_P(CheckpointFaultTest, PreviousSurvivesFailedOneIsInvisible) {
  FaultInjectionEnv fenv(env_);
  CheckpointWriter w(&fenv, root_, /*keep=*/1);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  GetParam().arm(&fenv);
  EXPECT_EQ(WriteStep(&w, 200), GetParam().want);

  EXPECT_EQ(Complete(), std::vector<int64_t>{100});
  CheckpointReader r(env_, root_);
  ExpectStep(r.LoadNewest(), 100);
  EXPECT_EQ(r.Load(200).status().code(), absl::StatusCode::kNotFound);
  // The failed attempt's .tmp was removed.
  EXPECT_EQ(RootChildren(), std::vector<std::string>{"ckpt-000000000100"});

  // Faults are one-shot; the next attempt succeeds and prunes (keep=1).
  fenv.SetPointCallback(FaultPoint::kMidWrite, nullptr);
  fenv.SetPointCallback(FaultPoint::kAfterDataBeforeManifest, nullptr);
  fenv.SetPointCallback(FaultPoint::kBeforeRename, nullptr);
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  ExpectStep(r.LoadNewest(), 200);
  EXPECT_EQ(Complete(), std::vector<int64_t>{200});
}

const absl::Status kIoError = absl::ErrnoToStatus(EIO, "injected");

INSTANTIATE_TEST_SUITE_P(
    Faults, CheckpointFaultTest,
    ::testing::Values(
        FaultCase{"FailedBlobSync",
                  [](FaultInjectionEnv* e) {
                    e->FailNth(FaultOp::kSync, 2, kIoError);
                  },
                  absl::Status(kIoError.code(),
                               "checkpoint 200: injected: Input/output "
                               "error")},
        FaultCase{"FailedManifestSync",
                  [](FaultInjectionEnv* e) {
                    e->FailNth(FaultOp::kSync, 4, absl::InternalError("s"));
                  },
                  absl::InternalError("checkpoint 200: s")},
        FaultCase{"ErrorMidWrite",
                  [](FaultInjectionEnv* e) {
                    e->FailNth(FaultOp::kAppend, 2,
                               absl::ResourceExhaustedError("disk full"));
                  },
                  absl::ResourceExhaustedError("checkpoint 200: disk full")},
        FaultCase{"FailedTmpDirSync",
                  [](FaultInjectionEnv* e) {
                    e->FailNth(FaultOp::kSyncDir, 1, absl::InternalError("d"));
                  },
                  absl::InternalError("checkpoint 200: d")},
        FaultCase{"FailedRename",
                  [](FaultInjectionEnv* e) {
                    e->FailNth(FaultOp::kRename, 1, absl::InternalError("r"));
                  },
                  absl::InternalError("checkpoint 200: r")},
        FaultCase{"AtMidWrite",
                  [](FaultInjectionEnv* e) {
                    Point(e, FaultPoint::kMidWrite).IgnoreError();
                  },
                  absl::AbortedError("checkpoint 200: mid_write")},
        FaultCase{
            "AtAfterDataBeforeManifest",
            [](FaultInjectionEnv* e) {
              Point(e, FaultPoint::kAfterDataBeforeManifest).IgnoreError();
            },
            absl::AbortedError("checkpoint 200: after_data_before_manifest")},
        FaultCase{"AtBeforeRename",
                  [](FaultInjectionEnv* e) {
                    Point(e, FaultPoint::kBeforeRename).IgnoreError();
                  },
                  absl::AbortedError("checkpoint 200: before_rename")}),
    [](const ::testing::TestParamInfo<FaultCase>& info) {
      return info.param.name;
    });

TEST_F(CheckpointTest, TornBlobIsCommittedButNeverLoaded) {
  FaultInjectionEnv fenv(env_);
  CheckpointWriter w(&fenv, root_, /*keep=*/2);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  fenv.TearNextFile("table_1.bin", 1000);
  // The disk acknowledged bytes it then lost: the write cannot tell.
  ASSERT_TRUE(WriteStep(&w, 200).ok());
  CheckpointReader r(env_, root_);
  EXPECT_EQ(r.Load(200).status(),
            absl::DataLossError(StepPath(200, "table_1.bin") +
                                ": size 1000 != manifest 100000"));
  ExpectStep(r.LoadNewest(), 100);
}

TEST_F(CheckpointTest, FailedRootSyncKeepsOlderCheckpoints) {
  FaultInjectionEnv fenv(env_);
  CheckpointWriter w(&fenv, root_, /*keep=*/1);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  // The first SyncDir is the .tmp directory's, the second the root's after
  // the rename: the new checkpoint is visible but not known durable.
  fenv.FailNth(FaultOp::kSyncDir, 2, absl::InternalError("root"));
  EXPECT_EQ(WriteStep(&w, 200), absl::InternalError("checkpoint 200: root"));
  ExpectStep(CheckpointReader(env_, root_).Load(100), 100);
}

TEST_F(CheckpointTest, FailedSwapKeepsTheOldVersionOfTheStep) {
  FaultInjectionEnv fenv(env_);
  CheckpointWriter w(&fenv, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  fenv.FailNth(FaultOp::kExchange, 1, absl::InternalError("x"));
  EXPECT_EQ(w.Write(100, "v2", {{"a.bin", "v2"}}),
            absl::InternalError("checkpoint 100: x"));
  ExpectStep(CheckpointReader(env_, root_).LoadNewest(), 100);
  EXPECT_EQ(RootChildren(), std::vector<std::string>{"ckpt-000000000100"});
}

TEST_F(CheckpointTest, RewriteWithoutExchangeMovesTheOldOneAside) {
  FaultInjectionEnv fenv(env_);
  CheckpointWriter w(&fenv, root_);
  ASSERT_TRUE(WriteStep(&w, 100).ok());
  fenv.FailNth(FaultOp::kExchange, 1, absl::UnimplementedError("no swap"));
  ASSERT_TRUE(w.Write(100, "v2", {{"a.bin", "v2"}}).ok());
  auto c = CheckpointReader(env_, root_).Load(100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata, "v2");
  EXPECT_EQ(RootChildren(), std::vector<std::string>{"ckpt-000000000100"});

  // If the second rename fails, the old one is put back.
  fenv.FailNth(FaultOp::kExchange, 1, absl::UnimplementedError("no swap"));
  fenv.FailNth(FaultOp::kRename, 2, absl::InternalError("r"));
  EXPECT_EQ(w.Write(100, "v3", {{"a.bin", "v3"}}),
            absl::InternalError("checkpoint 100: r"));
  c = CheckpointReader(env_, root_).Load(100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata, "v2");
  EXPECT_EQ(RootChildren(), std::vector<std::string>{"ckpt-000000000100"});
}

// A real crash (_exit(1) from SHARDPS_TEST_CHECKPOINT_FAULT) at each named
// point of the second checkpoint, in a child process.
class CheckpointCrashTest : public CheckpointTest,
                            public ::testing::WithParamInterface<std::string> {
};

TEST_P(CheckpointCrashTest, PreviousCheckpointLoadsAfterCrash) {
  const std::string spec = "crash_" + GetParam() + ":2";
  auto getenv_fn = [&spec](const char* name) -> const char* {
    return std::string(name) == kCheckpointFaultEnvVar ? spec.c_str() : nullptr;
  };
  EXPECT_EXIT(
      {
        auto fenv = CheckpointFaultEnvFromEnvironment(env_, getenv_fn);
        if (!fenv.ok() || *fenv == nullptr) std::exit(3);
        CheckpointWriter w(fenv->get(), root_);
        if (!WriteStep(&w, 100).ok()) std::exit(4);
        WriteStep(&w, 200).IgnoreError();
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "");

  CheckpointReader r(env_, root_);
  EXPECT_EQ(Complete(), std::vector<int64_t>{100});
  ExpectStep(r.LoadNewest(), 100);
  EXPECT_EQ(RootChildren(), (std::vector<std::string>{
                                "ckpt-000000000100", "ckpt-000000000200.tmp"}));
  if (GetParam() == "mid_write") {
    std::string torn;
    ASSERT_TRUE(
        env_->ReadFileToString(
                JoinPath(root_, "ckpt-000000000200.tmp/table_0.bin"), &torn)
            .ok());
    EXPECT_EQ(torn, "dens");  // half of "dense-200"
  }
  // The next write cleans the leftover.
  CheckpointWriter w(env_, root_);
  ASSERT_TRUE(WriteStep(&w, 300).ok());
  EXPECT_EQ(RootChildren(), (std::vector<std::string>{"ckpt-000000000100",
                                                      "ckpt-000000000300"}));
}

INSTANTIATE_TEST_SUITE_P(Points, CheckpointCrashTest,
                         ::testing::Values("mid_write",
                                           "after_data_before_manifest",
                                           "before_rename"));

}  // namespace
}  // namespace shardps
