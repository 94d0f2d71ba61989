#ifndef SHARDPS_TRAINER_CORE_PROGRESS_H_
#define SHARDPS_TRAINER_CORE_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "compression/threshold_push_encoder.h"
#include "trainer/core/json_lines.h"

namespace shardps {

// Where one training step's time went: loading the batch, pulling (net of
// the time the pservers held the pull), waiting for other trainers (the
// longest hold), forward and backward, pushing.
struct StepTimes {
  absl::Duration data, pull, wait, compute, push;
};

// The share of `elapsed` the steps spent blocked on communication (pull,
// push and waiting for other trainers): what overlap did not hide.
double ExposedComm(const StepTimes& t, absl::Duration elapsed);

// What the trainer says once, after its first steps, about the network:
// how much of the step the transfers take and which setting would cut it
// (docs/performance.md, "Which layout and compression").
// --compression (trainer/core/options.h, which includes this file).
enum class Compression;

struct NetworkPicture {
  // Shares of the steps' wall time: pulls and pushes (net of the time the
  // pservers held them), and waiting for the other trainers.
  double pull_share = 0;
  double push_share = 0;
  double wait_share = 0;
  int servers = 0;               // pservers
  int shared_servers = 0;        // of them, reached through shared memory
  int lane_servers = 0;          // of them, over the TCP lane
  Compression compression{};     // kNone
  bool compressed_pulls = true;  // kThreshold: --compressed_pulls
};

// Below this share of the step, the transfers are left alone.
inline constexpr double kNetworkShareWorthCutting = 0.25;

// One line: the transfers' share of the step and, when it is at least
// kNetworkShareWorthCutting, the flags or layout that would cut it, most
// effective first.
std::string NetworkAdvice(const NetworkPicture& p);

// What the trainer tells about its progress (docs/flags.md, "Metrics"):
// every `log_every_steps` steps a "step" metrics line with the loss, the
// samples per second and the share of each phase, and either a log line or,
// on a terminal, a progress bar redrawn at most five times a second.
// Requires external synchronization.
class ProgressReporter {
 public:
  struct Options {
    int trainer_id = 0;
    int num_passes = 1;
    int log_every_steps = 50;
    bool progress_bar = false;
    // The job's pservers and compression; set, the reporter logs
    // NetworkAdvice once, with the second report's window (the first holds
    // the start: connections, the first dense pull), or the last step's.
    std::function<NetworkPicture()> network;
  };
  // `metrics` must outlive the reporter.
  ProgressReporter(const Options& options, int64_t steps_per_pass,
                   int64_t total_steps, JsonLinesWriter* metrics);

  // Step `step` (counted from 1) of pass `pass` is done, with `loss_sum`
  // over `samples` examples; reports when due. `threshold` (null without
  // threshold compression) gives the compression figures of the line.
  void StepDone(int64_t step, int pass, const StepTimes& t, double loss_sum,
                int64_t samples, int64_t push_bytes, int64_t pull_bytes,
                ThresholdPushEncoder* threshold);
  // Ends the progress bar's line before another message (an evaluation);
  // the next step's wall time counts from now.
  void EndLine();

 private:
  // The figures since the last report.
  struct Window {
    StepTimes times;
    double loss_sum = 0;
    int64_t samples = 0;
    // Each step's wall time, from the end of the step before.
    std::vector<double> step_secs;
  };
  void WriteLine(int64_t step, int pass, absl::Duration elapsed,
                 int64_t push_bytes, int64_t pull_bytes,
                 ThresholdPushEncoder* threshold);
  void LogLine(int64_t step, int pass, absl::Duration elapsed) const;
  void DrawBar(int64_t step, int pass, absl::Duration elapsed) const;

  const Options options_;
  const int64_t steps_per_pass_;
  const int64_t total_steps_;
  JsonLinesWriter* const metrics_;
  Window window_;
  int64_t samples_ = 0;  // trained on by this trainer, every step
  absl::Time window_start_ = absl::Now();
  absl::Time last_step_ = absl::Now();
  absl::Time last_draw_ = absl::InfinitePast();
  int reports_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_PROGRESS_H_
