#include "trainer/core/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "trainer/core/options.h"

namespace shardps {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

ProgressReporter::ProgressReporter(const Options& options,
                                   int64_t steps_per_pass, int64_t total_steps,
                                   JsonLinesWriter* metrics)
    : options_(options),
      steps_per_pass_(steps_per_pass),
      total_steps_(total_steps),
      metrics_(metrics) {}

void ProgressReporter::StepDone(int64_t step, int pass, const StepTimes& t,
                                double loss_sum, int64_t samples,
                                int64_t push_bytes, int64_t pull_bytes,
                                ThresholdPushEncoder* threshold) {
  window_.times.data += t.data;
  window_.times.pull += t.pull;
  window_.times.wait += t.wait;
  window_.times.compute += t.compute;
  window_.times.push += t.push;
  window_.loss_sum += loss_sum;
  window_.samples += samples;
  samples_ += samples;
  const absl::Time now = absl::Now();
  window_.step_secs.push_back(Seconds(now - last_step_));
  last_step_ = now;
  const absl::Duration elapsed = now - window_start_;
  const bool report =
      step % options_.log_every_steps == 0 || step == total_steps_;
  if (report) {
    WriteLine(step, pass, elapsed, push_bytes, pull_bytes, threshold);
  }
  if (options_.progress_bar &&
      (now - last_draw_ > absl::Milliseconds(200) || step == total_steps_)) {
    last_draw_ = now;
    DrawBar(step, pass, elapsed);
  } else if (!options_.progress_bar && report) {
    LogLine(step, pass, elapsed);
  }
  if (report) {
    ++reports_;
    if (options_.network &&
        (reports_ == 2 || (reports_ == 1 && step == total_steps_))) {
      NetworkPicture p = options_.network();
      const double secs = Seconds(elapsed);
      if (secs > 0) {
        p.pull_share = Seconds(window_.times.pull) / secs;
        p.push_share = Seconds(window_.times.push) / secs;
        p.wait_share = Seconds(window_.times.wait) / secs;
      }
      if (options_.progress_bar) std::fputs("\n", stderr);
      LOG(INFO) << "trainer " << options_.trainer_id << ", steps "
                << step - static_cast<int64_t>(window_.step_secs.size()) + 1
                << "-" << step << ": " << NetworkAdvice(p);
    }
    window_ = Window{};
    window_start_ = absl::Now();
  }
}

double ExposedComm(const StepTimes& t, absl::Duration elapsed) {
  const double secs = absl::ToDoubleSeconds(elapsed);
  if (secs <= 0) return 0.0;
  return std::min(1.0, absl::ToDoubleSeconds(t.pull + t.push + t.wait) / secs);
}

void ProgressReporter::WriteLine(int64_t step, int pass, absl::Duration elapsed,
                                 int64_t push_bytes, int64_t pull_bytes,
                                 ThresholdPushEncoder* threshold) {
  JsonLine line("step");
  if (threshold != nullptr) {
    const ThresholdPushEncoder::Stats c = threshold->TakeStats();
    line.Add("threshold",
             c.threshold_count > 0 ? c.threshold_sum / c.threshold_count : 0.0)
        .Add("sparsity", c.elements > 0
                             ? static_cast<double>(c.selected) / c.elements
                             : 0.0)
        .Add("threshold_messages", c.threshold_messages)
        .Add("bitmap_messages", c.bitmap_messages)
        .Add("empty_messages", c.empty_messages)
        .Add("nonfinite_messages", c.nonfinite_messages);
  }
  const StepTimes& t = window_.times;
  // The slowest step of the line and the median (a stall shows as the
  // first far above the second).
  std::vector<double> secs = window_.step_secs;
  double longest = 0, median = 0;
  if (!secs.empty()) {
    longest = *std::max_element(secs.begin(), secs.end());
    std::nth_element(secs.begin(), secs.begin() + secs.size() / 2, secs.end());
    median = secs[secs.size() / 2];
  }
  line.Add("max_step_s", longest).Add("median_step_s", median);
  metrics_->Write(line.Add("trainer_id", options_.trainer_id)
                      .Add("pass", pass)
                      .Add("step", step)
                      .Add("total_steps", total_steps_)
                      .Add("samples", samples_)
                      .Add("train_loss", window_.loss_sum / window_.samples)
                      .Add("samples_per_s", window_.samples / Seconds(elapsed))
                      .Add("data_s", Seconds(t.data))
                      .Add("compute_s", Seconds(t.compute))
                      .Add("pull_s", Seconds(t.pull))
                      .Add("push_s", Seconds(t.push))
                      .Add("wait_s", Seconds(t.wait))
                      .Add("exposed_comm", ExposedComm(t, elapsed))
                      .Add("push_bytes", push_bytes)
                      .Add("pull_bytes", pull_bytes));
}

void ProgressReporter::LogLine(int64_t step, int pass,
                               absl::Duration elapsed) const {
  const StepTimes& t = window_.times;
  const double secs = Seconds(elapsed);
  LOG(INFO) << absl::StrFormat(
      "trainer %d pass %d step %d/%d: loss %.4f, %.0f samples/s (data %.0f%%, "
      "compute %.0f%%, pull %.0f%%, push %.0f%%, wait %.0f%%; communication "
      "not hidden %.0f%%)",
      options_.trainer_id, pass, step, total_steps_,
      window_.loss_sum / window_.samples, window_.samples / secs,
      100 * Seconds(t.data) / secs, 100 * Seconds(t.compute) / secs,
      100 * Seconds(t.pull) / secs, 100 * Seconds(t.push) / secs,
      100 * Seconds(t.wait) / secs, 100 * ExposedComm(t, elapsed));
}

void ProgressReporter::DrawBar(int64_t step, int pass,
                               absl::Duration elapsed) const {
  const int64_t done_in_pass = (step - 1) % steps_per_pass_ + 1;
  const int width = 30;
  const int filled = static_cast<int>(width * done_in_pass / steps_per_pass_);
  std::fprintf(
      stderr,
      "\rtrainer %d pass %d/%d [%s%s] %lld/%lld loss %.4f %.0f samples/s ",
      options_.trainer_id, pass + 1, options_.num_passes,
      std::string(filled, '#').c_str(),
      std::string(width - filled, ' ').c_str(),
      static_cast<long long>(done_in_pass),
      static_cast<long long>(steps_per_pass_),
      window_.samples ? window_.loss_sum / window_.samples : 0.0,
      window_.samples / std::max(1e-9, Seconds(elapsed)));
}

void ProgressReporter::EndLine() {
  if (options_.progress_bar) std::fputs("\n", stderr);
  last_step_ = absl::Now();  // the evaluation is not part of a step
}

namespace {

std::string Percent(double share) {
  return absl::StrCat(static_cast<int>(std::lround(100 * share)), "%");
}

// What the encoding `p` uses could do to cut the bytes of remote pservers.
void CompressionAdvice(const NetworkPicture& p, std::vector<std::string>* cut) {
  switch (p.compression) {
    case Compression::kNone:
      cut->push_back(
          "--compression=bf16 halves the bytes both ways (the canonical "
          "MLP ended 0.6 points below float32 after one pass)");
      cut->push_back(
          "--compression=threshold sends over 200 times fewer bytes both "
          "ways (1.3 points below after one pass)");
      break;
    case Compression::kFp16:
    case Compression::kBf16:
      cut->push_back(
          "--compression=threshold sends over 100 times fewer bytes than "
          "16-bit values, both ways");
      break;
    case Compression::kThreshold:
      cut->push_back(
          !p.compressed_pulls
              ? "--compressed_pulls (the default) shrinks the pulls as much as "
                "the pushes"
              : "the transfers are already compressed both ways, so the time "
                "is round trips and the pservers' work: more pservers, or "
                "pservers on less busy hosts");
      break;
  }
}

// What the layout (lanes, pservers beside the trainers) could cut.
void LayoutAdvice(const NetworkPicture& p, std::vector<std::string>* cut) {
  if (p.shared_servers + p.lane_servers < p.servers &&
      p.compression != Compression::kThreshold) {
    cut->push_back(
        "the TCP lane (trainer and pserver --tcp_lane, the default; not "
        "with TLS or replication) moves dense values without gRPC's "
        "copies: 2 to 3 times its throughput (docs/wire_protocol.md)");
  }
  if (p.shared_servers == 0) {
    cut->push_back(
        "a pserver beside each trainer (docs/deploy.md) halves what each "
        "host's link carries and moves the local share through shared "
        "memory");
  }
}

}  // namespace

std::string NetworkAdvice(const NetworkPicture& p) {
  const double net = p.pull_share + p.push_share;
  std::string line = absl::StrCat(
      "pulls and pushes take ", Percent(net), " of the step (pull ",
      Percent(p.pull_share), ", push ", Percent(p.push_share),
      "; waiting for the other trainers ", Percent(p.wait_share), "); ",
      p.shared_servers, " of ", p.servers, " pservers through shared memory");
  if (net < kNetworkShareWorthCutting) {
    return absl::StrCat(line, ": nothing to cut");
  }
  std::vector<std::string> cut;
  if (p.servers == p.shared_servers) {
    cut.push_back(
        "every pserver is on this host, so the time is theirs (applying the "
        "updates): more pservers share it");
  } else {
    CompressionAdvice(p, &cut);
    LayoutAdvice(p, &cut);
  }
  return absl::StrCat(line, "; to cut it: ", absl::StrJoin(cut, "; or "),
                      " (docs/performance.md, \"Which layout and "
                      "compression\")");
}

}  // namespace shardps
