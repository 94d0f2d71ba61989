// The chief's checkpoint requests: which steps, the resumed step skipped,
// ABORTED passed on, other failures logged, pservers without a checkpoint
// directory named.
#include "trainer/core/checkpoint_requester.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "trainer/transport/testing/fake_ps_client.h"

namespace shardps {
namespace {

// Records the checkpoint steps asked for; answers with `reply`.
class CheckpointServer : public testing::FakePsClient {
 public:
  void CheckpointAsync(const CheckpointRequest& req, CheckpointResponse* resp,
                       StatusCallback done) override {
    steps.push_back(req.step());
    resp->set_previous_write_error(write_error);
    if (!replies.empty()) {
      absl::Status r = replies.front();
      replies.erase(replies.begin());
      done(r);
      return;
    }
    done(reply);
  }
  void GetStatusAsync(const GetStatusRequest&, GetStatusResponse* resp,
                      StatusCallback done) override {
    resp->set_checkpoints_enabled(enabled);
    resp->set_max_version(max_version);
    max_version += versions_per_status;
    done(absl::OkStatus());
  }
  std::vector<int64_t> steps;
  absl::Status reply;
  std::vector<absl::Status> replies;  // answered first, in order
  int64_t max_version = 0;
  int64_t versions_per_status = 0;  // the job moves on between two looks
  std::string write_error;
  bool enabled = true;
};

TEST(CheckpointRequesterTest, EveryNStepsButTheResumedOne) {
  CheckpointServer ps;
  RequestStamp stamp(0);
  JobClient client({&ps}, &stamp);
  CheckpointRequester r(&client, 3, /*chief=*/true);
  r.ResumedAt(3);
  for (int64_t step = 3; step <= 9; ++step) ASSERT_TRUE(r.AtStep(step).ok());
  EXPECT_EQ(ps.steps, (std::vector<int64_t>{6, 9}));
}

TEST(CheckpointRequesterTest, NonChiefsAndZeroAskForNone) {
  CheckpointServer ps;
  RequestStamp stamp(1);
  JobClient client({&ps}, &stamp);
  CheckpointRequester worker(&client, 3, /*chief=*/false);
  CheckpointRequester never(&client, 0, true);
  for (int64_t step = 1; step <= 6; ++step) {
    ASSERT_TRUE(worker.AtStep(step).ok());
    ASSERT_TRUE(never.AtStep(step).ok());
  }
  EXPECT_TRUE(ps.steps.empty());
  ps.enabled = false;
  EXPECT_TRUE(worker.CheckPservers().ok());
}

TEST(CheckpointRequesterTest, AbortedIsPassedOnOtherFailuresAreNot) {
  CheckpointServer ps;
  RequestStamp stamp(0);
  JobClient client({&ps}, &stamp);
  CheckpointRequester r(&client, 2, true);
  ps.reply = absl::InternalError("disk full");
  EXPECT_TRUE(r.AtStep(2).ok());
  ps.reply = absl::AbortedError("rolled back");
  EXPECT_EQ(r.AtStep(2).code(), absl::StatusCode::kAborted);  // asked again
  EXPECT_EQ(ps.steps, (std::vector<int64_t>{2, 2}));
}

TEST(CheckpointRequesterTest, AFailedWriteIsCountedAtTheNextRequest) {
  CheckpointServer a, b;
  RequestStamp stamp(0);
  JobClient client({&a, &b}, &stamp);
  std::vector<std::string> errors;
  b.write_error = "RESOURCE_EXHAUSTED: checkpoint of step 2 to /ckpt: full";
  ASSERT_TRUE(client.Checkpoint(4, &errors).ok());
  EXPECT_EQ(errors, (std::vector<std::string>{
                        "pserver fake: RESOURCE_EXHAUSTED: checkpoint of step "
                        "2 to /ckpt: full"}));
  CheckpointRequester r(&client, 2, true);
  EXPECT_TRUE(r.AtStep(2).ok());  // training goes on
  EXPECT_EQ(r.write_failures(), 1);
  b.write_error.clear();
  EXPECT_TRUE(r.AtStep(4).ok());
  EXPECT_EQ(r.write_failures(), 1);
  // Said even when another pserver refused the request.
  b.write_error = "INTERNAL: checkpoint of step 4 to /ckpt: EIO";
  a.reply = absl::AbortedError("rolled back");
  EXPECT_EQ(r.AtStep(6).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(r.write_failures(), 2);
  EXPECT_EQ(a.steps, (std::vector<int64_t>{4, 2, 4, 6}));
}

// Counts what the requester reports.
class FailureCounter : public TrainingObserver {
 public:
  void CheckpointsFailed(int64_t n) override { failed += n; }
  int64_t failed = 0;
};

TEST(CheckpointRequesterTest, AFullDiskIsCountedAtEachIntervalUntilItHasRoom) {
  CheckpointServer ps;
  RequestStamp stamp(0);
  JobClient client({&ps}, &stamp);
  FailureCounter observer;
  CheckpointRequester r(&client, 2, true, &observer);
  ps.reply = absl::ResourceExhaustedError(
      "no checkpoint taken: /ckpt has 0.00 MB free");
  EXPECT_TRUE(r.AtStep(2).ok());  // training goes on
  EXPECT_TRUE(r.AtStep(4).ok());
  EXPECT_EQ(r.write_failures(), 2);
  EXPECT_EQ(observer.failed, 2);
  // Room again: the next interval's checkpoint is taken.
  ps.reply = absl::OkStatus();
  EXPECT_TRUE(r.AtStep(5).ok());
  EXPECT_TRUE(r.AtStep(6).ok());
  EXPECT_EQ(ps.steps, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(observer.failed, 2);
  EXPECT_FALSE(r.DueAt(6));
}

TEST(CheckpointRequesterTest, PserversWithoutACheckpointDirAreNamed) {
  CheckpointServer a, b;
  b.enabled = false;
  RequestStamp stamp(0);
  JobClient client({&a, &b}, &stamp);
  CheckpointRequester r(&client, 5, true);
  absl::Status s = r.CheckPservers();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("pserver fake has none"), std::string::npos) << s;
}

// K of N: the chief asks for a version past the newest any pserver holds,
// and further ahead when a unit got past it meanwhile.
TEST(CheckpointRequesterTest, KofNAsksAheadOfTheNewestVersion) {
  CheckpointServer a, b;
  a.max_version = 103;
  b.max_version = 107;
  RequestStamp stamp(0);
  JobClient client({&a, &b}, &stamp);
  CheckpointRequester r(&client, 100, true, nullptr, /*k_of_n=*/true);
  ASSERT_TRUE(r.AtStep(100).ok());
  EXPECT_EQ(a.steps, (std::vector<int64_t>{109}));
  EXPECT_EQ(b.steps, (std::vector<int64_t>{109}));
  EXPECT_FALSE(r.DueAt(100));  // taken for the chief's step 100

  // Pserver b's units pass the version asked for twice; the third try
  // (6 steps past the newest) is taken.
  b.versions_per_status = 5;
  const absl::Status past = absl::FailedPreconditionError(
      "checkpoint of step 209: table w block 0 is at version 210 already");
  b.replies = {past, past};
  a.max_version = b.max_version = 200;
  a.steps.clear();
  b.steps.clear();
  ASSERT_TRUE(r.AtStep(200).ok());
  EXPECT_EQ(b.steps, (std::vector<int64_t>{202, 209, 216}));
  EXPECT_EQ(r.write_failures(), 0);
  EXPECT_FALSE(r.DueAt(200));

  // Never taken in kTries: logged, and asked again at the next interval.
  b.replies = {past, past, past};
  b.steps.clear();
  ASSERT_TRUE(r.AtStep(300).ok());
  EXPECT_EQ(b.steps.size(), static_cast<size_t>(CheckpointRequester::kTries));
  EXPECT_TRUE(r.DueAt(300));
}

}  // namespace
}  // namespace shardps
