// The pserver's Prometheus metrics: what a scrape shows of the jobs, and of
// the calls the gRPC binding reports.
#include "pserver/server/pserver_metrics.h"

#include <cstdlib>
#include <memory>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Render(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

// The value of `series` (name and labels as the text format writes them) on
// `page`; NaN when absent.
double Value(const std::string& page, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (absl::StartsWith(line, series + " ")) {
      return std::strtod(std::string(line.substr(series.size() + 1)).c_str(),
                         nullptr);
    }
  }
  return std::nan("");
}

// A started pserver with a 64 MiB memory limit and a checkpoint directory,
// and the collector that shows it.
class PserverCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PserverOptions o;
    o.checkpoint_dir = tmp_.Path("ckpt");
    o.store.max_memory_bytes = 64 << 20;
    auto ps = Pserver::Create(o);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = *std::move(ps);
    ASSERT_TRUE(ps_->Start().ok());
    collector_ = std::make_unique<PserverCollector>(ps_.get());
  }

  // Makes the default job (one dense Adam table "w" of two blocks, one
  // trainer) and pushes three steps to it.
  void RunThreeSteps() {
    ParameterStore* store = ps_->store();
    const JobSpec job = testing::MakeJobSpec(
        SYNC, 1, {testing::DenseTableSpec("w", 4, 2, testing::Adam(0.1f))});
    ASSERT_TRUE(store->InitJob(job, {{0, 0}, {0, 1}}).ok());
    ASSERT_TRUE(store->SetInitialValues({{0, 0, {1, 2}}, {0, 1, {3, 4}}}).ok());
    ASSERT_TRUE(store->CommitInit().ok());
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(store->Push(0, step, {{0, 0, {1, 1}}, {0, 1, {1, 1}}}).ok());
    }
  }

  // The page a scrape of the collector shows now.
  std::string Scrape() { return Render(collector_->Collect()); }

  testing::ScopedTempDir tmp_{"pserver_metrics"};
  std::unique_ptr<Pserver> ps_;
  std::unique_ptr<PserverCollector> collector_;
};

TEST_F(PserverCollectorTest, BeforeInitShowsOneUnreadyJobAndNoCheckpoint) {
  const std::string page = Scrape();
  EXPECT_EQ(Value(page, "shardps_pserver_jobs"), 1);
  EXPECT_EQ(Value(page, "shardps_pserver_job_ready{job_id=\"default\"}"), 0);
  EXPECT_EQ(Value(page, "shardps_pserver_memory_limit_bytes"), 64 << 20);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_checkpoints_total{job_id=\"default\","
                  "result=\"ok\"}"),
            0);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_checkpoints_total{job_id=\"default\","
                  "result=\"no_room\"}"),
            0);
  // No checkpoint yet: no time of the last one, rather than 1970.
  EXPECT_THAT(page, Not(HasSubstr("shardps_pserver_last_checkpoint")));
}

TEST_F(PserverCollectorTest, ShowsEachJobsStepsTrainersAndMemory) {
  ASSERT_NO_FATAL_FAILURE(RunThreeSteps());
  const std::string page = Scrape();
  EXPECT_EQ(Value(page, "shardps_pserver_job_ready{job_id=\"default\"}"), 1);
  EXPECT_EQ(Value(page, "shardps_pserver_trainers{job_id=\"default\"}"), 1);
  EXPECT_EQ(Value(page, "shardps_pserver_pushes_total{job_id=\"default\"}"), 3);
  EXPECT_EQ(
      Value(page, "shardps_pserver_block_updates_total{job_id=\"default\"}"),
      6);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_table_steps{job_id=\"default\","
                  "table=\"w\"}"),
            3);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_non_finite_updates_total{job_id="
                  "\"default\",table=\"w\"}"),
            0);
  // Two blocks of two floats: value, gradient sum and Adam's two slots.
  const double dense = Value(page,
                             "shardps_pserver_memory_bytes{job_id="
                             "\"default\",kind=\"dense\"}");
  EXPECT_GE(dense, 2 * 2 * 4 * 4);
  EXPECT_GE(Value(page, "shardps_pserver_memory_used_bytes"), dense);
}

TEST_F(PserverCollectorTest, ShowsTheFinalCheckpointOfStop) {
  ASSERT_NO_FATAL_FAILURE(RunThreeSteps());
  const absl::Time before = absl::Now();
  ps_->Stop();  // the final checkpoint, at step 3
  const std::string page = Scrape();
  EXPECT_EQ(Value(page,
                  "shardps_pserver_checkpoints_total{job_id=\"default\","
                  "result=\"ok\"}"),
            1);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_last_checkpoint_step{job_id="
                  "\"default\"}"),
            3);
  EXPECT_GT(Value(page,
                  "shardps_pserver_last_checkpoint_size_bytes{job_id="
                  "\"default\"}"),
            0);
  EXPECT_GE(Value(page,
                  "shardps_pserver_last_checkpoint_duration_seconds{"
                  "job_id=\"default\"}"),
            0);
  EXPECT_NEAR(Value(page,
                    "shardps_pserver_last_checkpoint_timestamp_seconds{"
                    "job_id=\"default\"}"),
              absl::ToDoubleSeconds(before - absl::UnixEpoch()), 60);
}

TEST(RpcMetricsTest, CountsCallsByCodeBytesAndLatency) {
  prometheus::Registry registry;
  RpcMetrics rpc(&registry, {"Push", "Pull"});
  const std::string page0 = Render(registry.Collect());
  EXPECT_EQ(Value(page0,
                  "shardps_pserver_rpcs_total{code=\"OK\",method=\"Push"
                  "\"}"),
            0);
  rpc.Record("Push", absl::StatusCode::kOk, absl::Milliseconds(3), 1000, 2);
  rpc.Record("Push", absl::StatusCode::kOk, absl::Milliseconds(30), 500, 2);
  rpc.Record("Push", absl::StatusCode::kInvalidArgument, absl::Milliseconds(1),
             70, 0);
  rpc.Record("Nope", absl::StatusCode::kOk, absl::Seconds(1), 5, 5);
  rpc.RecordPullWait(absl::Milliseconds(200));
  const std::string page = Render(registry.Collect());
  EXPECT_EQ(
      Value(page, "shardps_pserver_rpcs_total{code=\"OK\",method=\"Push\"}"),
      2);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_rpcs_total{code=\"INVALID_ARGUMENT\","
                  "method=\"Push\"}"),
            1);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_received_bytes_total{method=\"Push"
                  "\"}"),
            1570);
  EXPECT_EQ(Value(page, "shardps_pserver_sent_bytes_total{method=\"Push\"}"),
            4);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_rpc_duration_seconds_count{method="
                  "\"Push\"}"),
            3);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_rpc_duration_seconds_bucket{method="
                  "\"Push\",le=\"0.005\"}"),
            2);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_rpc_duration_seconds_count{method="
                  "\"Pull\"}"),
            0);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_pull_wait_seconds_bucket{le="
                  "\"0.25\"}"),
            1);
  EXPECT_EQ(Value(page,
                  "shardps_pserver_pull_wait_seconds_bucket{le="
                  "\"0.1\"}"),
            0);
  EXPECT_THAT(page, Not(HasSubstr("Nope")));
}

}  // namespace
}  // namespace shardps
