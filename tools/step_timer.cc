// Times a trainer's compute step: Model::TrainBatch of a config's model on
// the CPU or the CUDA backend, without pservers. That is what a trainer's
// step computes between its pull and its push: the parameters go to the
// backend (uploaded on a GPU), forward, loss, backward, and the gradients
// come back to host memory for the push. The parameters stay at their
// initial values (the pservers would apply the updates), so every step does
// the same work.
//
//   step_timer --config=configs/fmnist_cnn.pbtxt --use_gpu [--steps=300]
//
// Reads the config's training data (trainer 0 of 1) and steps through it in
// order. Prints a summary line to stderr and one JSON line to stdout:
//   {"event":"step_timer","config":"fmnist_cnn","backend":"cuda:0",
//    "batch":32,"steps":300,"median_ms":...,"mean_ms":...,"p10_ms":...,
//    "p90_ms":...,"min_ms":...,"samples_per_s":...,"loss_first":...,
//    "loss_last":...}
// samples_per_s is batch / median. --describe prints the CUDA device and
// the versions of the driver, runtime, cuBLAS and cuDNN that it loaded. Exit
// status 0, 1 when a step fails, 2 for bad flags or data.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "google/protobuf/text_format.h"
#include "kernels/call_timing_backend.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "trainer/core/json_lines.h"
#include "trainer/data/data_shard.h"
#include "trainer/input_pipeline.h"
#include "trainer/model/model.h"

DEFINE_string(config, "",
              "model config (protobuf text), e.g. "
              "configs/fmnist_cnn.pbtxt");
DEFINE_bool(use_gpu, false, "compute on the CUDA backend (else the CPU's)");
DEFINE_int32(gpu_id, 0, "--use_gpu: the CUDA device");
DEFINE_bool(describe, false,
            "print the CUDA device and library versions (--gpu_id) and exit");
DEFINE_int32(num_threads, 1, "CPU backend: threads (as the trainer's flag)");
DEFINE_int32(batch_size, 0, "examples per step; 0 = the config's");
DEFINE_int32(warmup_steps, 20, "untimed steps first");
DEFINE_int32(steps, 200, "timed steps");
DEFINE_bool(per_call, false,
            "then as many steps again, each backend call waited for and "
            "timed (kernels/call_timing_backend.h): where the step's time "
            "goes, printed as one JSON line per kind of call");
DEFINE_string(train_images, "",
              "IDX training images, replacing the config's data.train_images");
DEFINE_string(train_labels, "",
              "IDX training labels, replacing the config's data.train_labels");
DEFINE_string(test_images, "",
              "IDX test images, replacing the config's data.test_images (the "
              "data loader reads them too)");
DEFINE_string(test_labels, "",
              "IDX test labels, replacing the config's data.test_labels");

namespace shardps {
namespace {

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "step_timer: %s\n", message.c_str());
  return code;
}

absl::StatusOr<ModelConfig> ReadConfig(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::stringstream ss;
  ss << f.rdbuf();
  ModelConfig config;
  if (!google::protobuf::TextFormat::ParseFromString(ss.str(), &config)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a ModelConfig in protobuf text format"));
  }
  return config;
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  return v[i];
}

// --per_call: FLAGS_steps more steps with every backend call waited for
// and timed; a line per kind of call.
int TimeCalls(Model* model, InputPipeline* input, CallTimingBackend* calls,
              int batch, int64_t batches, const std::string& config,
              const std::string& backend_name) {
  calls->set_enabled(true);
  for (int s = 0; s < FLAGS_steps; ++s) {
    input->LoadTrainBatch(s % batches, batch);
    auto stats = model->TrainBatch(input->x(), input->labels(), batch);
    if (!stats.ok()) {
      return Fail(1, absl::StrCat("per-call step ", s, ": ",
                                  stats.status().ToString()));
    }
  }
  for (const CallTimingBackend::Calls& c : calls->Report()) {
    const double per_step = absl::ToDoubleMilliseconds(c.total) / FLAGS_steps;
    const double count = static_cast<double>(c.count) / FLAGS_steps;
    std::fprintf(stderr, "step_timer:   %-20s %5.1f calls/step %8.3f ms/step\n",
                 c.name.c_str(), count, per_step);
    JsonLine line("step_timer_call");
    line.Add("config", config)
        .Add("backend", backend_name)
        .Add("call", c.name)
        .Add("calls_per_step", count)
        .Add("ms_per_step", per_step);
    std::printf("%s\n", line.str().c_str());
  }
  return 0;
}

// --config with the data files the flags name instead of its own.
absl::StatusOr<ModelConfig> ConfigFromFlags() {
  absl::StatusOr<ModelConfig> config = ReadConfig(FLAGS_config);
  if (!config.ok()) return config;
  DataConfig* data = config->mutable_data();
  if (!FLAGS_train_images.empty()) data->set_train_images(FLAGS_train_images);
  if (!FLAGS_train_labels.empty()) data->set_train_labels(FLAGS_train_labels);
  if (!FLAGS_test_images.empty()) data->set_test_images(FLAGS_test_images);
  if (!FLAGS_test_labels.empty()) data->set_test_labels(FLAGS_test_labels);
  return config;
}

// The CUDA backend with --use_gpu, the CPU backend's --num_threads without.
absl::StatusOr<std::unique_ptr<Backend>> BackendFromFlags() {
  if (!FLAGS_use_gpu) {
    return std::unique_ptr<Backend>(
        std::make_unique<CpuBackend>(FLAGS_num_threads));
  }
  auto gpu = CreateCudaBackend(FLAGS_gpu_id);
  if (!gpu.ok()) {
    return absl::Status(gpu.status().code(),
                        absl::StrCat("--use_gpu: ", gpu.status().message()));
  }
  return std::unique_ptr<Backend>(std::move(gpu).value());
}

// The timings `ms` of the steps: a line on stderr, a JSON line on stdout.
void Report(const std::string& config, const std::string& backend, int batch,
            const std::vector<double>& ms, double loss_first,
            double loss_last) {
  const double median = Percentile(ms, 0.5);
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  std::fprintf(stderr,
               "step_timer: %s on %s, batch %d: median %.3f ms, mean %.3f ms "
               "over %d steps (after %d warm-up), %.0f samples/s\n",
               config.c_str(), backend.c_str(), batch, median, mean,
               FLAGS_steps, FLAGS_warmup_steps, batch / median * 1e3);
  JsonLine line("step_timer");
  line.Add("config", config)
      .Add("backend", backend)
      .Add("batch", batch)
      .Add("steps", FLAGS_steps)
      .Add("median_ms", median)
      .Add("mean_ms", mean)
      .Add("p10_ms", Percentile(ms, 0.1))
      .Add("p90_ms", Percentile(ms, 0.9))
      .Add("min_ms", *std::min_element(ms.begin(), ms.end()))
      .Add("samples_per_s", batch / median * 1e3)
      .Add("loss_first", loss_first)
      .Add("loss_last", loss_last);
  std::printf("%s\n", line.str().c_str());
}

// --describe: prints the CUDA device and library versions; the exit status.
int Describe() {
  absl::StatusOr<std::string> d = DescribeCudaDevice(FLAGS_gpu_id);
  if (!d.ok()) return Fail(2, std::string(d.status().message()));
  std::printf("%s\n", d->c_str());
  return 0;
}

// The timed steps' durations, and the losses of the first and last steps.
struct StepTimes {
  std::vector<double> ms;
  double loss_first = 0, loss_last = 0;
};

// Runs --warmup_steps and then --steps timed steps through the batches in
// order, into `times`; 0, or 1 (said on stderr) when a step fails.
int TimeSteps(Model* model, InputPipeline* input, int batch, int64_t batches,
              StepTimes* times) {
  const int total = FLAGS_warmup_steps + FLAGS_steps;
  for (int s = 0; s < total; ++s) {
    input->LoadTrainBatch(s % batches, batch);
    const absl::Time start = absl::Now();
    auto stats = model->TrainBatch(input->x(), input->labels(), batch);
    const absl::Duration took = absl::Now() - start;
    if (!stats.ok()) {
      return Fail(1, absl::StrCat("step ", s, ": ", stats.status().ToString()));
    }
    const double loss = stats->loss_sum / stats->count;
    if (s == 0) times->loss_first = loss;
    times->loss_last = loss;
    if (s >= FLAGS_warmup_steps) {
      times->ms.push_back(absl::ToDoubleMilliseconds(took));
    }
  }
  return 0;
}

int Run() {
  if (FLAGS_describe) return Describe();
  if (FLAGS_config.empty()) return Fail(2, "--config is required");
  if (FLAGS_steps <= 0 || FLAGS_warmup_steps < 0 || FLAGS_batch_size < 0 ||
      FLAGS_num_threads <= 0) {
    return Fail(2,
                "--steps and --num_threads must be positive, --warmup_steps "
                "and --batch_size not negative");
  }
  absl::StatusOr<ModelConfig> config = ConfigFromFlags();
  if (!config.ok()) return Fail(2, std::string(config.status().message()));
  const int batch =
      FLAGS_batch_size > 0 ? FLAGS_batch_size : config->batch_size();
  if (batch <= 0) return Fail(2, "the config has no batch_size; pass one");
  auto input = InputPipeline::Create(&*config, 0, 1, batch);
  if (!input.ok()) return Fail(2, std::string(input.status().message()));
  if ((*input)->has_sparse_table()) {
    return Fail(2,
                "models with a sparse input need pservers; time a dense "
                "config");
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend = BackendFromFlags();
  if (!backend.ok()) return Fail(2, std::string(backend.status().message()));
  const std::string backend_name = (*backend)->name();
  // Untimed until --per_call's steps.
  auto timing = std::make_unique<CallTimingBackend>(*std::move(backend));
  timing->set_enabled(false);
  CallTimingBackend* calls = timing.get();
  auto model = Model::Create(*config, (*input)->model_input_dim(),
                             (*input)->num_classes(), std::move(timing));
  if (!model.ok()) return Fail(2, std::string(model.status().message()));
  (*model)->InitializeParameters(config->seed());
  const int64_t batches =
      ShardedDataset::StepsPerPass((*input)->records_per_trainer(), batch);
  if (batches <= 0) return Fail(2, "fewer training records than one batch");
  (*input)->StartPass(0, /*shuffle=*/false, 0);

  StepTimes times;
  const int failed =
      TimeSteps(model->get(), input->get(), batch, batches, &times);
  if (failed != 0) return failed;
  Report(config->name(), backend_name, batch, times.ms, times.loss_first,
         times.loss_last);
  if (FLAGS_per_call) {
    return TimeCalls(model->get(), input->get(), calls, batch, batches,
                     config->name(), backend_name);
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "times a trainer's compute step (forward, backward, transfers) of a "
      "dense config on the CPU or CUDA backend\n  step_timer "
      "--config=configs/fmnist_cnn.pbtxt [--use_gpu] [--steps=200]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return shardps::Run();
}
