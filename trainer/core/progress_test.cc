// The trainer's step lines: written every log_every_steps steps and at the
// last, with the window's loss and phase times, and the compression figures
// with threshold compression.
#include "trainer/core/progress.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/core/options.h"

namespace shardps {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

TEST(ProgressReporterTest, AStepLineEveryNStepsAndAtTheEnd) {
  testing::ScopedTempDir tmp("progress_test");
  const std::string path = tmp.Path("metrics.jsonl");
  auto metrics = JsonLinesWriter::Open(path);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ProgressReporter::Options o;
  o.trainer_id = 3;
  o.log_every_steps = 2;
  ProgressReporter p(o, /*steps_per_pass=*/4, /*total_steps=*/5,
                     metrics->get());
  StepTimes t;
  t.compute = absl::Milliseconds(10);
  for (int64_t step = 1; step <= 5; ++step) {
    p.StepDone(step, static_cast<int>((step - 1) / 4), t,
               /*loss_sum=*/2.0 * step, /*samples=*/4, 100 * step, 50 * step,
               nullptr);
  }
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 3u);  // steps 2, 4 and 5 (the last)
  EXPECT_NE(lines[0].find("\"event\":\"step\""), std::string::npos);
  EXPECT_NE(lines[0].find("\"trainer_id\":3"), std::string::npos);
  EXPECT_NE(lines[0].find("\"step\":2"), std::string::npos);
  // Steps 1 and 2: loss sums 2 and 4 over 8 samples.
  EXPECT_NE(lines[0].find("\"train_loss\":0.75"), std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find("\"compute_s\":0.02"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("\"step\":5"), std::string::npos);
  EXPECT_NE(lines[2].find("\"pass\":1"), std::string::npos);
  EXPECT_NE(lines[2].find("\"push_bytes\":500"), std::string::npos);
  EXPECT_EQ(lines[0].find("sparsity"), std::string::npos);
}

TEST(ProgressReporterTest, ExposedCommIsTheBlockedShareOfTheStep) {
  StepTimes t;
  t.compute = absl::Milliseconds(50);
  t.pull = absl::Milliseconds(10);
  t.push = absl::Milliseconds(20);
  t.wait = absl::Milliseconds(10);
  EXPECT_DOUBLE_EQ(ExposedComm(t, absl::Milliseconds(100)), 0.4);
  EXPECT_DOUBLE_EQ(ExposedComm(t, absl::Milliseconds(20)), 1.0);  // capped
  EXPECT_DOUBLE_EQ(ExposedComm(t, absl::ZeroDuration()), 0.0);
  EXPECT_DOUBLE_EQ(ExposedComm(StepTimes{}, absl::Milliseconds(5)), 0.0);
}

TEST(ProgressReporterTest, ThresholdFiguresComeFromTheEncoder) {
  testing::ScopedTempDir tmp("progress_test");
  const std::string path = tmp.Path("metrics.jsonl");
  auto metrics = JsonLinesWriter::Open(path);
  ASSERT_TRUE(metrics.ok());
  ThresholdPushEncoder::Options eo;
  eo.adaptive = false;
  eo.threshold = 0.5;
  ThresholdPushEncoder encoder(eo, {100});
  std::string msg;
  std::vector<float> g(100, 0.0f);
  g[7] = 1.0f;  // one value of 100 reaches the threshold
  ASSERT_TRUE(encoder.Encode(0, 0, 0, g, &msg).ok());
  ProgressReporter::Options o;
  o.log_every_steps = 1;
  ProgressReporter p(o, 10, 10, metrics->get());
  p.StepDone(1, 0, StepTimes{}, 1.0, 1, 0, 0, &encoder);
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("\"sparsity\":0.01"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"threshold_messages\":1"), std::string::npos);
  EXPECT_NE(lines[0].find("\"threshold\":0.5"), std::string::npos);
}

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

NetworkPicture Picture(double pull, double push, int servers, int shared,
                       Compression c = Compression::kNone) {
  NetworkPicture p;
  p.pull_share = pull;
  p.push_share = push;
  p.wait_share = 0.05;
  p.servers = servers;
  p.shared_servers = shared;
  p.compression = c;
  return p;
}

TEST(NetworkAdviceTest, SaysTheShareAndLeavesASmallOneAlone) {
  EXPECT_EQ(NetworkAdvice(Picture(0.1, 0.1, 2, 0)),
            "pulls and pushes take 20% of the step (pull 10%, push 10%; "
            "waiting for the other trainers 5%); 0 of 2 pservers through "
            "shared memory: nothing to cut");
}

TEST(NetworkAdviceTest, DenseOverTheNetworkGetsCompressionAndTheLayout) {
  const std::string s = NetworkAdvice(Picture(0.4, 0.45, 1, 0));
  EXPECT_THAT(s, AllOf(HasSubstr("take 85% of the step"),
                       HasSubstr("--compression=bf16"),
                       HasSubstr("--compression=threshold"),
                       HasSubstr("a pserver beside each trainer")));
  // With a pserver already beside: compression only.
  EXPECT_THAT(NetworkAdvice(Picture(0.3, 0.3, 2, 1)),
              AllOf(HasSubstr("--compression=bf16"),
                    Not(HasSubstr("beside each trainer"))));
}

TEST(NetworkAdviceTest, EachCompressionGetsWhatIsLeft) {
  EXPECT_THAT(NetworkAdvice(Picture(0.3, 0.3, 2, 1, Compression::kBf16)),
              AllOf(HasSubstr("--compression=threshold"),
                    Not(HasSubstr("bf16 halves"))));
  NetworkPicture p = Picture(0.3, 0.3, 2, 1, Compression::kThreshold);
  p.compressed_pulls = false;
  EXPECT_THAT(NetworkAdvice(p), HasSubstr("--compressed_pulls"));
  p.compressed_pulls = true;
  EXPECT_THAT(NetworkAdvice(p), HasSubstr("already compressed both ways"));
}

TEST(NetworkAdviceTest, PserversOffTheLaneGetTheLane) {
  NetworkPicture p = Picture(0.3, 0.3, 2, 0);
  EXPECT_THAT(NetworkAdvice(p), HasSubstr("the TCP lane"));
  p.lane_servers = 2;
  EXPECT_THAT(NetworkAdvice(p), Not(HasSubstr("TCP lane")));
  p.lane_servers = 1;
  p.shared_servers = 1;
  EXPECT_THAT(NetworkAdvice(p), Not(HasSubstr("TCP lane")));
  p = Picture(0.3, 0.3, 2, 0, Compression::kThreshold);
  EXPECT_THAT(NetworkAdvice(p), Not(HasSubstr("TCP lane")));
}

TEST(NetworkAdviceTest, AllOnThisHostPointsAtThePservers) {
  EXPECT_THAT(NetworkAdvice(Picture(0.3, 0.3, 2, 2)),
              AllOf(HasSubstr("every pserver is on this host"),
                    Not(HasSubstr("--compression")),
                    EndsWith("\"Which layout and compression\")")));
}

}  // namespace
}  // namespace shardps
