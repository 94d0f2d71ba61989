#include "trainer/monitoring/trainer_monitoring.h"

#include <cmath>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

std::string Render(const TrainerMetrics& m) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, m.registry()->Collect());
  return out.str();
}

constexpr char kLabels[] = "{job_id=\"ctr\",trainer_id=\"3\"}";

std::string Line(const std::string& name, const std::string& value) {
  return name + kLabels + " " + value + "\n";
}

TEST(TrainerMetricsTest, StepsAddUpTheirPhasesSamplesAndBytes) {
  TrainerMetrics m("ctr", 3);
  EXPECT_THAT(Render(m), HasSubstr(Line("shardps_trainer_ready", "0")));
  m.Ready(10);
  StepReport s;
  s.step = 11;
  s.pass = 1;
  s.times = StepTimes{absl::Milliseconds(1), absl::Milliseconds(2),
                      absl::Milliseconds(4), absl::Milliseconds(8),
                      absl::Milliseconds(16)};
  s.loss_sum = 6;
  s.samples = 4;
  s.push_bytes = 100;
  s.pull_bytes = 300;
  m.StepDone(s);
  s.step = 12;
  m.StepDone(s);
  const std::string page = Render(m);
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_ready", "1")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_step", "12")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_pass", "1")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_steps_total", "2")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_samples_total", "8")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_pushed_bytes_total", "200")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_pulled_bytes_total", "600")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_data_seconds_total", "0.002")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_pull_seconds_total", "0.004")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_wait_seconds_total", "0.008")));
  EXPECT_THAT(
      page, HasSubstr(Line("shardps_trainer_compute_seconds_total", "0.016")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_push_seconds_total", "0.032")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_train_loss", "1.5")));
  // 31 ms a step: both in the 50 ms bucket, none in the 25 ms one.
  EXPECT_THAT(page, HasSubstr("shardps_trainer_step_duration_seconds_bucket{"
                              "job_id=\"ctr\",trainer_id=\"3\",le=\"0.025\"} "
                              "0\n"));
  EXPECT_THAT(page, HasSubstr("shardps_trainer_step_duration_seconds_bucket{"
                              "job_id=\"ctr\",trainer_id=\"3\",le=\"0.05\"} "
                              "2\n"));
  m.Stopped();
  EXPECT_THAT(Render(m), HasSubstr(Line("shardps_trainer_ready", "0")));
}

TEST(TrainerMetricsTest, EvaluationsAndRecoveries) {
  TrainerMetrics m("ctr", 3);
  EXPECT_THAT(Render(m), HasSubstr(Line("shardps_trainer_test_auc", "Nan")));
  EvalReport e;
  e.pass = 0;
  e.step = 468;
  e.loss = 0.5;
  e.accuracy = 0.75;
  e.auc = 0.625;
  e.pull_bytes = 1000;
  m.Evaluated(e);
  m.Recovered(500, 400);
  m.CheckpointsFailed(2);
  m.CheckpointsFailed(1);
  const std::string page = Render(m);
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_test_loss", "0.5")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_test_accuracy", "0.75")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_test_auc", "0.625")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_eval_step", "468")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_pulled_bytes_total", "1000")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_recoveries_total", "1")));
  EXPECT_THAT(page,
              HasSubstr(Line("shardps_trainer_steps_redone_total", "100")));
  EXPECT_THAT(page, HasSubstr(Line("shardps_trainer_step", "400")));
  EXPECT_THAT(
      page, HasSubstr(Line("shardps_trainer_checkpoint_failures_total", "3")));
}

}  // namespace
}  // namespace shardps
