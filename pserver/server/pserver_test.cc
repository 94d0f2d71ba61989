// The pserver without its transport: options checked, the newest
// checkpoint loaded at start, and a final checkpoint written at a stop.
#include "pserver/server/pserver.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "base/job_id.h"
#include "common/storage/checkpoint.h"
#include "common/storage/fault_injection_env.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pserver/checkpoint/store_snapshots.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

TEST(PserverTest, BadOptionsAreRefused) {
  PserverOptions o;
  o.store.num_trainers = -1;
  EXPECT_EQ(Pserver::Create(o).status().message(),
            "--num_gradient_servers must be >= 0, got -1");
  o = PserverOptions();
  o.keep_checkpoints = 0;
  EXPECT_EQ(Pserver::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue 34: a full or read-only checkpoint folder failed every checkpoint,
// silently at first. Said at start, naming the folder.
TEST(PserverTest, ACheckpointFolderThatCannotBeWrittenStopsTheStart) {
  testing::ScopedTempDir tmp("pserver_test");
  FaultInjectionEnv env(Env::Default());
  env.FailNth(FaultOp::kSync, 1,
              absl::ResourceExhaustedError("No space left on device"));
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  o.env = &env;
  auto ps = Pserver::Create(o);
  ASSERT_TRUE(ps.ok()) << ps.status();
  absl::Status s = (*ps)->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("--checkpoint_dir=" + o.checkpoint_dir +
                                   ": cannot write there (No space left"));
  std::vector<std::string> left;
  ASSERT_TRUE(Env::Default()->GetChildren(o.checkpoint_dir, &left).ok());
  EXPECT_TRUE(left.empty());  // the probe is gone
  // Writable: it starts.
  o.env = nullptr;
  ps = Pserver::Create(o);
  ASSERT_TRUE(ps.ok());
  EXPECT_TRUE((*ps)->Start().ok());
}

TEST(PserverTest, AFinalCheckpointAtStopIsLoadedAtTheNextStart) {
  testing::ScopedTempDir tmp("pserver_test");
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  const JobSpec job = testing::MakeJobSpec(
      SYNC, 1, {testing::DenseTableSpec("w", 2, 2, testing::Sgd(1.0f))});
  {
    auto ps = Pserver::Create(o);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ASSERT_TRUE((*ps)->Start().ok());  // nothing to load
    ParameterStore* store = (*ps)->store();
    ASSERT_TRUE(store->InitJob(job, {{0, 0}}).ok());
    const std::vector<float> w = {1, 2}, g = {1, 1};
    ASSERT_TRUE(store->SetInitialValues({{0, 0, w}}).ok());
    ASSERT_TRUE(store->CommitInit().ok());
    ASSERT_TRUE(store->Push(0, 0, {{0, 0, g}}).ok());
    (*ps)->Stop();  // at step boundary 1: a final checkpoint
  }
  auto again = Pserver::Create(o);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Start().ok());
  ParameterStore* store = (*again)->store();
  ASSERT_TRUE(store->ready());
  EXPECT_EQ(store->base_step(), 1);
  EXPECT_EQ(store->generation(), 1u);
  EXPECT_EQ(store->TEST_BlockValues(0, 0), (std::vector<float>{0, 1}));
}

// Starts job `store` on one trainer with table "w" = {1, 2} and applies one
// step of gradient g (SGD, lr 1).
void RunOneStep(ParameterStore* store, float g) {
  const JobSpec job = testing::MakeJobSpec(
      SYNC, 1, {testing::DenseTableSpec("w", 2, 2, testing::Sgd(1.0f))});
  ASSERT_TRUE(store->InitJob(job, {{0, 0}}).ok());
  const std::vector<float> w = {1, 2}, grad = {g, g};
  ASSERT_TRUE(store->SetInitialValues({{0, 0, w}}).ok());
  ASSERT_TRUE(store->CommitInit().ok());
  ASSERT_TRUE(store->Push(0, 0, {{0, 0, grad}}).ok());
}

ParameterStore* StoreOf(Pserver* ps, const std::string& job) {
  // The handler's store: the same object the pserver made for the job.
  auto h = ps->Job(job);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? (*h)->store_for_testing() : nullptr;
}

TEST(PserverTest, JobsAreSeparateAndEachKeepsItsCheckpoints) {
  testing::ScopedTempDir tmp("pserver_jobs");
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  {
    auto ps = Pserver::Create(o);
    ASSERT_TRUE(ps.ok());
    ASSERT_TRUE((*ps)->Start().ok());
    RunOneStep(StoreOf(ps->get(), "a"), 1.0f);
    RunOneStep(StoreOf(ps->get(), "b"), -1.0f);
    EXPECT_FALSE((*ps)->store()->ready());  // the default job has none
    EXPECT_EQ((*ps)->JobIds(), (std::vector<std::string>{"a", "b", "default"}));
    (*ps)->Stop();
  }
  for (const char* job : {"a", "b"}) {
    EXPECT_TRUE(Env::Default()
                    ->FileExists(tmp.Path(
                        absl::StrCat("ckpt/", job, "/", CheckpointDirName(1))))
                    .ok())
        << job;
  }
  auto again = Pserver::Create(o);
  ASSERT_TRUE((*again)->Start().ok());
  // Both come back at start, each with its own values.
  EXPECT_EQ((*again)->JobIds(),
            (std::vector<std::string>{"a", "b", "default"}));
  EXPECT_EQ(StoreOf(again->get(), "a")->TEST_BlockValues(0, 0),
            (std::vector<float>{0, 1}));
  EXPECT_EQ(StoreOf(again->get(), "b")->TEST_BlockValues(0, 0),
            (std::vector<float>{2, 3}));
}

TEST(PserverTest, MoreJobFoldersThanMaxJobsStillStart) {
  testing::ScopedTempDir tmp("pserver_many_jobs");
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  {
    auto ps = Pserver::Create(o);
    ASSERT_TRUE((*ps)->Start().ok());
    for (const char* job : {"a", "b", "c"}) {
      RunOneStep(StoreOf(ps->get(), job), 1.0f);
    }
    (*ps)->Stop();
  }
  o.max_jobs = 2;
  o.job_retention = absl::Milliseconds(50);
  o.sweep_interval = absl::Milliseconds(10);
  auto again = Pserver::Create(o);
  ASSERT_TRUE((*again)->Start().ok());
  EXPECT_EQ((*again)->JobIds(), (std::vector<std::string>{"a", "default"}));
  // "c" comes back once "a" is freed.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::StatusOr<std::shared_ptr<RequestHandler>> c;
  do {
    absl::SleepFor(absl::Milliseconds(20));
    c = (*again)->Job("c");
  } while (!c.ok() && absl::Now() < deadline);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->store_for_testing()->TEST_BlockValues(0, 0),
            (std::vector<float>{0, 1}));
}

TEST(PserverTest, JobIdsAndCountAreChecked) {
  PserverOptions o;
  o.max_jobs = 2;
  auto ps = Pserver::Create(o);
  ASSERT_TRUE((*ps)->Start().ok());  // the default job
  EXPECT_TRUE((*ps)->Job("a").ok());
  EXPECT_EQ((*ps)->Job("b").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*ps)->Job("../etc").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*ps)->Job("").status().code(), absl::StatusCode::kInvalidArgument);
  // The names of checkpoints at the top of --checkpoint_dir.
  for (const char* reserved : {"GENERATION", "ckpt-000000000009", "ckpt-"}) {
    const absl::Status s = (*ps)->Job(reserved).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << reserved;
    EXPECT_TRUE(absl::StrContains(s.message(), "reserved")) << s;
  }
  EXPECT_TRUE(ValidateJobId("GENERATIONS").ok());
  EXPECT_TRUE(ValidateJobId("ckpt").ok());
}

// Writes a checkpoint of one step of gradient g at `dir`, as a job's
// folder holds it (GENERATION, ckpt-000000000001).
void WriteJobFolder(const std::string& dir, float g) {
  ParameterStore store{StoreOptions()};
  RunOneStep(&store, g);
  Checkpointer c(Env::Default(), dir, 2);
  ASSERT_TRUE(c.WriteGeneration(1).ok());
  ASSERT_TRUE(c.Save(*StoreSnapshots(&store).Snapshot(1)).ok());
  ASSERT_TRUE(c.Flush().ok());
}

TEST(PserverTest, AJobFolderWithAReservedNameIsLeftInPlace) {
  testing::ScopedTempDir tmp("pserver_reserved");
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  // Jobs of an earlier version that took names now reserved, and one that
  // did not.
  WriteJobFolder(tmp.Path("ckpt/GENERATION"), 1.0f);
  WriteJobFolder(tmp.Path("ckpt/ckpt-000000000009"), 1.0f);
  WriteJobFolder(tmp.Path("ckpt/a"), -1.0f);
  auto ps = Pserver::Create(o);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ASSERT_TRUE((*ps)->Start().ok());
  // Neither was taken for the single-job layout's: the default job has no
  // checkpoint, and both folders are as they were.
  EXPECT_FALSE((*ps)->store()->ready());
  EXPECT_EQ((*ps)->JobIds(), (std::vector<std::string>{"a", "default"}));
  for (const char* job : {"GENERATION", "ckpt-000000000009"}) {
    EXPECT_TRUE(
        Env::Default()
            ->FileExists(tmp.Path(absl::StrCat("ckpt/", job, "/GENERATION")))
            .ok())
        << job;
    EXPECT_TRUE(Env::Default()
                    ->FileExists(tmp.Path(
                        absl::StrCat("ckpt/", job, "/", CheckpointDirName(1))))
                    .ok())
        << job;
  }
  EXPECT_FALSE(Env::Default()->FileExists(tmp.Path("ckpt/default")).ok());
  EXPECT_EQ(StoreOf(ps->get(), "a")->TEST_BlockValues(0, 0),
            (std::vector<float>{2, 3}));
}

TEST(PserverTest, TheSingleJobLayoutBecomesTheDefaultJob) {
  testing::ScopedTempDir tmp("pserver_layout");
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  // A pserver of before jobs wrote its checkpoints at the top.
  WriteJobFolder(o.checkpoint_dir, 1.0f);
  auto ps = Pserver::Create(o);
  ASSERT_TRUE((*ps)->Start().ok());
  ASSERT_TRUE((*ps)->store()->ready());
  EXPECT_EQ((*ps)->store()->TEST_BlockValues(0, 0), (std::vector<float>{0, 1}));
  EXPECT_TRUE(
      Env::Default()->FileExists(tmp.Path("ckpt/default/GENERATION")).ok());
}

TEST(PserverTest, AnIdleJobIsFreedAfterItsRetention) {
  testing::ScopedTempDir tmp("pserver_retention");
  FakeClock clock;
  PserverOptions o;
  o.checkpoint_dir = tmp.Path("ckpt");
  o.store.clock = &clock;
  o.sweep_interval = absl::Milliseconds(5);
  o.job_retention = absl::Minutes(10);
  auto ps = Pserver::Create(o);
  ASSERT_TRUE((*ps)->Start().ok());
  RunOneStep(StoreOf(ps->get(), "a"), 1.0f);
  clock.Advance(absl::Minutes(9));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ((*ps)->JobIds().size(), 2u);
  clock.Advance(absl::Minutes(2));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*ps)->JobIds().size() == 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ((*ps)->JobIds(), std::vector<std::string>{kDefaultJobId});
  // Its final checkpoint brings it back as it was.
  EXPECT_EQ(StoreOf(ps->get(), "a")->TEST_BlockValues(0, 0),
            (std::vector<float>{0, 1}));
}

}  // namespace
}  // namespace shardps
