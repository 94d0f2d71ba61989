// Job checkpoints: finding every shard of a step wherever its folder lies,
// the job manifest and its damage, and resharding N -> M pservers with the
// optimizer state, update counts and admission counts of every unit.
#include "pserver/checkpoint/reshard.h"

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/placement/shard_map.h"
#include "common/storage/checkpoint.h"
#include "common/storage/fault_injection_env.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/checkpoint_job.h"

namespace shardps {
namespace {

using testing::GetState;
using ::testing::HasSubstr;
using testing::NewStore;
using testing::Options;
using testing::Place;
using testing::RunStep;
using testing::State;

// Writes `snap` as the checkpoint of a pserver whose --checkpoint_dir is
// `dir` (job "default").
void WriteShard(const std::string& dir, const StoreSnapshot& snap) {
  std::vector<CheckpointFile> files;
  for (const auto& [name, data] : snap.files) files.push_back({name, data});
  ASSERT_TRUE(CheckpointWriter(Env::Default(), JoinPath(dir, "default"))
                  .Write(snap.info.step(), snap.info.SerializeAsString(), files)
                  .ok());
}

// A job of one pserver holding everything, 3 steps in: rows with Adam
// state, pending sightings, dense blocks with momentum and Adam.
StoreSnapshot WholeJob(std::unique_ptr<ParameterStore>* store) {
  *store = NewStore();
  EXPECT_TRUE((*store)->state()->AdoptPlacement(Place(0, 1)).ok());
  for (int64_t step = 0; step < 3; ++step) {
    EXPECT_TRUE(RunStep(store->get(), step).ok());
  }
  auto snap = StoreSnapshots(store->get()).Snapshot(3);
  EXPECT_TRUE(snap.ok()) << snap.status();
  return *snap;
}

std::string ReadFile(const std::string& path) {
  std::string s;
  EXPECT_TRUE(Env::Default()->ReadFileToString(path, &s).ok()) << path;
  return s;
}

void WriteFile(const std::string& path, const std::string& data) {
  auto f = Env::Default()->NewWritableFile(path);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(data).ok());
  ASSERT_TRUE((*f)->Close().ok());
}

class ReshardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    whole_ = WholeJob(&store_);
    WriteShard(tmp_.Path("one/ps-0"), whole_);
  }

  // Reshards `from` (a folder of job checkpoints) onto `m` pservers at
  // `to`.
  absl::StatusOr<JobCheckpoint> Reshard(const std::string& from,
                                        const std::string& to, int m) {
    auto job = FindJobCheckpoint(Env::Default(), from, "default");
    if (!job.ok()) return job.status();
    return ReshardJob(Env::Default(), *job, to, m, nullptr);
  }

  testing::ScopedTempDir tmp_{"reshard"};
  std::unique_ptr<ParameterStore> store_;
  StoreSnapshot whole_;
};

TEST_F(ReshardTest, OneToThreeToTwoToOneGivesTheJobBack) {
  auto three = Reshard(tmp_.Path("one"), tmp_.Path("three"), 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(three->num_servers, 3);
  EXPECT_EQ(three->manifest_path,
            JobManifestPath(tmp_.Path("three"), "default", 3));
  // Each shard loads into a store of its own: its blocks are the ones the
  // placement gives it, and every row is on exactly one.
  int64_t rows = 0, pending = 0, blocks = 0;
  for (int i = 0; i < 3; ++i) {
    auto snap =
        CheckpointReader(Env::Default(), three->shards[i].folder).Load(3);
    ASSERT_TRUE(snap.ok()) << snap.status();
    StoreSnapshot s;
    ASSERT_TRUE(s.info.ParseFromString(snap->metadata));
    for (auto& f : snap->files) s.files.emplace_back(f.name, f.data);
    EXPECT_EQ(s.info.placement().server_index(), i);
    EXPECT_EQ(s.info.placement().num_servers(), 3);
    for (const BlockRef& b : s.info.blocks()) {
      EXPECT_EQ(
          DenseBlockServer(TableHash(s.info.job().tables(b.table_id()).name()),
                           b.block(), 3),
          i);
    }
    blocks += s.info.blocks_size();
    ParameterStore shard(Options());
    ASSERT_TRUE(StoreSnapshots(&shard).Restore(s, 1).ok());
    auto stats = shard.SparseStats();
    rows += stats[0].counters.rows;
    pending += stats[0].counters.pending_keys;
  }
  EXPECT_EQ(blocks, 3);
  EXPECT_EQ(rows, 4);
  EXPECT_EQ(pending, 3);

  auto two = Reshard(tmp_.Path("three"), tmp_.Path("two"), 2);
  ASSERT_TRUE(two.ok()) << two.status();
  auto one = Reshard(tmp_.Path("two"), tmp_.Path("back"), 1);
  ASSERT_TRUE(one.ok()) << one.status();
  auto back = ReshardShard(Env::Default(), *one, 0, 1, nullptr);
  ASSERT_TRUE(back.ok()) << back.status();
  ParameterStore restored(Options());
  ASSERT_TRUE(StoreSnapshots(&restored).Restore(*back, 1).ok());
  EXPECT_EQ(GetState(&restored), GetState(store_.get()));
  // The dense blobs come back byte for byte; the steps that follow give
  // the same values (optimizer state and sightings came along).
  EXPECT_EQ(*testing::FindFile(*back, "table-0.bin"),
            *testing::FindFile(whole_, "table-0.bin"));
  for (int64_t step = 3; step < 6; ++step) {
    ASSERT_TRUE(RunStep(store_.get(), step).ok());
    ASSERT_TRUE(RunStep(&restored, step, /*generation=*/1).ok());
  }
  EXPECT_EQ(GetState(&restored), GetState(store_.get()));
}

TEST_F(ReshardTest, ProgressNamesEachShardRead) {
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("one"), "default");
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<std::string> lines;
  auto out = ReshardJob(Env::Default(), *job, tmp_.Path("to"), 2,
                        [&](absl::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr("pserver 0 of 2: read shard 0 of 1"));
  EXPECT_THAT(lines[3], HasSubstr("pserver 1 of 2: wrote"));
  // A second run into the same folder is refused.
  EXPECT_EQ(ReshardJob(Env::Default(), *job, tmp_.Path("to"), 2, nullptr)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReshardTest, IncompleteStepsSayWhatIsMissing) {
  ASSERT_TRUE(Reshard(tmp_.Path("one"), tmp_.Path("three"), 3).ok());
  ASSERT_TRUE(Env::Default()->DeleteDir(tmp_.Path("three/pserver-1")).ok());
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("three"), "default");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("step 3: no shard 1 of 3"));
  // Not the job asked for.
  job = FindJobCheckpoint(Env::Default(), tmp_.Path("three"), "other");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("no pserver checkpoint"));
  EXPECT_EQ(FindJobCheckpoint(Env::Default(), tmp_.Path("three"), "../x")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ReshardTest, OneShardInTwoFoldersIsNotAJob) {
  WriteShard(tmp_.Path("one/copy-of-ps-0"), whole_);
  auto survey =
      SurveyJobCheckpoints(Env::Default(), tmp_.Path("one"), "default");
  ASSERT_TRUE(survey.ok()) << survey.status();
  EXPECT_TRUE(survey->complete.empty());
  ASSERT_EQ(survey->incomplete.size(), 1u);
  EXPECT_THAT(survey->incomplete[0], HasSubstr("shard 0 of 1 is in both"));
}

TEST_F(ReshardTest, ShardsOfOtherJobSpecsAreNotAJob) {
  StoreSnapshot a = whole_, b = whole_;
  *a.info.mutable_placement() = Place(0, 2);
  *b.info.mutable_placement() = Place(1, 2);
  b.info.mutable_job()->set_global_batch_size(99);
  WriteShard(tmp_.Path("mixed/a"), a);
  WriteShard(tmp_.Path("mixed/b"), b);
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("mixed"), "default");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(job.status().message(), HasSubstr("different job specs"));
}

TEST_F(ReshardTest, ARowInAShardThatDoesNotHoldItIsDamage) {
  // The whole job's rows written as both shards of 2: half of them sit in
  // a shard their key does not land on.
  StoreSnapshot a = whole_, b = whole_;
  *a.info.mutable_placement() = Place(0, 2);
  *b.info.mutable_placement() = Place(1, 2);
  a.info.clear_blocks();
  b.info.clear_blocks();
  WriteShard(tmp_.Path("bad/a"), a);
  WriteShard(tmp_.Path("bad/b"), b);
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("bad"), "default");
  ASSERT_TRUE(job.ok()) << job.status();
  auto out = ReshardShard(Env::Default(), *job, 0, 1, nullptr);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(out.status().message(), HasSubstr("which does not hold it"));
  EXPECT_THAT(out.status().message(), HasSubstr("table-"));
}

TEST_F(ReshardTest, ReplicationNeedsEnoughPservers) {
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("one"), "default");
  ASSERT_TRUE(job.ok());
  job->shards[0].info.mutable_job()->set_replication(3);
  auto out = ReshardShard(Env::Default(), *job, 0, 2, nullptr);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("at least that many"));
  EXPECT_EQ(ReshardShard(Env::Default(), *job, 2, 2, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class JobManifestTest : public ReshardTest {
 protected:
  void SetUp() override {
    ReshardTest::SetUp();
    auto out = Reshard(tmp_.Path("one"), tmp_.Path("two"), 2);
    ASSERT_TRUE(out.ok()) << out.status();
    manifest_ = out->manifest_path;
  }

  absl::Status Find() {
    return FindJobCheckpoint(Env::Default(), tmp_.Path("two"), "default")
        .status();
  }

  std::string manifest_;
};

TEST_F(JobManifestTest, RoundTrips) {
  const std::string text = ReadFile(manifest_);
  EXPECT_THAT(text, HasSubstr("shardps-job-checkpoint 1\njob default\nstep 3"
                              "\ngeneration 0\nplacement 1 2\nshard 0 "
                              "pserver-0/default "));
  auto parsed = ParseJobManifest(text, manifest_, tmp_.Path("two"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->shards[1].folder, tmp_.Path("two/pserver-1/default"));
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("two"), "default");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->manifest_path, manifest_);
}

TEST_F(JobManifestTest, AFlippedByteLeavesTheStepOutNamingTheFile) {
  std::string text = ReadFile(manifest_);
  text[30] ^= 1;
  WriteFile(manifest_, text);
  absl::Status s = Find();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(manifest_));
  EXPECT_THAT(s.message(), HasSubstr("checksum"));
  // Truncated.
  WriteFile(manifest_, ReadFile(manifest_).substr(0, 40));
  s = Find();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(manifest_));
  auto survey =
      SurveyJobCheckpoints(Env::Default(), tmp_.Path("two"), "default");
  ASSERT_TRUE(survey.ok());
  EXPECT_EQ(survey->damaged_manifests, std::vector<std::string>{manifest_});
}

TEST_F(JobManifestTest, HostileFoldersAreRefused) {
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("two"), "default");
  ASSERT_TRUE(job.ok());
  for (const std::string folder :
       {"/etc", "pserver-0/../../x", "./pserver-0", "a b", ""}) {
    JobCheckpoint bad = *job;
    bad.shards[1].folder = JoinPath(tmp_.Path("two"), folder);
    auto text = SerializeJobManifest(tmp_.Path("two"), bad);
    if (!text.ok()) continue;  // the writer refuses it too
    // Written by hand with a valid checksum: the reader refuses it.
    absl::Status s =
        ParseJobManifest(*text, manifest_, tmp_.Path("two")).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << folder;
    EXPECT_THAT(s.message(), HasSubstr("not a plain folder")) << folder;
  }
  // Forged by hand with a valid checksum: the reader refuses it too.
  for (const std::string folder : {"../../etc", "/etc", "a/./b", "a//b"}) {
    std::string text = absl::StrCat(
        "shardps-job-checkpoint 1\njob default\nstep 3\ngeneration 0\n"
        "placement 1 1\nshard 0 ",
        folder, " 00000000\n");
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(text.data()), text.size()));
    absl::StrAppendFormat(&text, "checksum %08x\n", crc);
    absl::Status s =
        ParseJobManifest(text, manifest_, tmp_.Path("two")).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << folder;
    EXPECT_THAT(s.message(), HasSubstr("not a plain folder")) << folder;
  }
}

TEST_F(JobManifestTest, AReplacedShardLeavesTheStepOutUntilRewritten) {
  // Shard 1 rewritten (another step's bytes under the same name): its
  // MANIFEST no longer has the CRC the job manifest recorded.
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("two"), "default");
  ASSERT_TRUE(job.ok());
  auto snap = ReshardShard(Env::Default(), *job, 1, 2, nullptr);
  ASSERT_TRUE(snap.ok());
  snap->info.set_generation(7);
  std::vector<CheckpointFile> files;
  for (const auto& [name, data] : snap->files) files.push_back({name, data});
  ASSERT_TRUE(CheckpointWriter(Env::Default(), job->shards[1].folder)
                  .Write(3, snap->info.SerializeAsString(), files)
                  .ok());
  absl::Status s = Find();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("shard 1 is"));
  EXPECT_THAT(s.message(), HasSubstr(manifest_));
  // The pserver that wrote the step again (its final checkpoint, a new
  // timeline) writes the manifest again: the step is whole once more.
  auto wrote =
      UpdateJobManifest(Env::Default(), tmp_.Path("two"), "default", 3);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_TRUE(*wrote);
  EXPECT_TRUE(Find().ok());
}

TEST_F(ReshardTest, TheLastPserverOfAStepWritesItsJobManifest) {
  // Two pservers writing under one shared folder, shard by shard.
  StoreSnapshot a = whole_, b = whole_;
  *a.info.mutable_placement() = Place(0, 2);
  *b.info.mutable_placement() = Place(1, 2);
  const std::string root = tmp_.Path("shared");
  WriteShard(JoinPath(root, "ps-0"), a);
  auto wrote = UpdateJobManifest(Env::Default(), root, "default", 3);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_FALSE(*wrote);  // shard 1 is not there yet
  WriteShard(JoinPath(root, "ps-1"), b);
  wrote = UpdateJobManifest(Env::Default(), root, "default", 3);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_TRUE(*wrote);
  const std::string manifest = JobManifestPath(root, "default", 3);
  EXPECT_TRUE(Env::Default()->FileExists(manifest).ok());
  // The other pserver, a moment later, leaves it.
  EXPECT_FALSE(*UpdateJobManifest(Env::Default(), root, "default", 3));
  // Step 3's shards removed (retention), step 5 written: its manifest
  // replaces step 3's.
  a.info.set_step(5);
  b.info.set_step(5);
  WriteShard(JoinPath(root, "ps-0"), a);
  WriteShard(JoinPath(root, "ps-1"), b);
  for (const char* ps : {"ps-0", "ps-1"}) {
    ASSERT_TRUE(
        Env::Default()
            ->DeleteDir(JoinPath(JoinPath(JoinPath(root, ps), "default"),
                                 CheckpointDirName(3)))
            .ok());
  }
  EXPECT_TRUE(*UpdateJobManifest(Env::Default(), root, "default", 5));
  EXPECT_TRUE(absl::IsNotFound(Env::Default()->FileExists(manifest)));
  auto job = FindJobCheckpoint(Env::Default(), root, "default");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->step, 5);
  EXPECT_EQ(job->manifest_path, JobManifestPath(root, "default", 5));
}

TEST_F(ReshardTest, ADeadReshardLeavesNothingThatLooksWhole) {
  auto job = FindJobCheckpoint(Env::Default(), tmp_.Path("one"), "default");
  ASSERT_TRUE(job.ok());
  // The run dies as the second pserver's checkpoint is committed.
  FaultInjectionEnv env(Env::Default());
  env.SetPointCallback(FaultPoint::kBeforeRename, [](int checkpoint,
                                                     const std::string&) {
    return checkpoint == 2 ? absl::AbortedError("killed") : absl::OkStatus();
  });
  auto out = ReshardJob(&env, *job, tmp_.Path("to"), 3, nullptr);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(absl::IsNotFound(Env::Default()->FileExists(tmp_.Path("to"))));
  auto partial =
      FindJobCheckpoint(Env::Default(), tmp_.Path("to.tmp"), "default");
  EXPECT_EQ(partial.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(partial.status().message(), HasSubstr("no shard 1, 2 of 3"));
  // Run again: the leftover goes, the reshard completes.
  out = ReshardJob(Env::Default(), *job, tmp_.Path("to"), 3, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(
      absl::IsNotFound(Env::Default()->FileExists(tmp_.Path("to.tmp"))));
  EXPECT_TRUE(
      FindJobCheckpoint(Env::Default(), tmp_.Path("to"), "default").ok());
}

}  // namespace
}  // namespace shardps
