#include "trainer/trainer.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/wire_limits.h"
#include "glog/logging.h"
#include "trainer/dataset_loader.h"
#include "trainer/metrics.h"
#include "trainer/model.h"
#include "trainer/param_client.h"
#include "trainer/saved_model.h"

namespace shardps {
namespace {

constexpr int64_t kDefaultBlockSize = 65536;
constexpr int kEvalBatch = 1000;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
};

EvalResult Evaluate(Model* model, const IdxData& test) {
  BatchStats total;
  for (int64_t start = 0; start < test.num_records; start += kEvalBatch) {
    const int n = static_cast<int>(
        std::min<int64_t>(kEvalBatch, test.num_records - start));
    BatchStats s = model->Evaluate(test.features.data() + start * test.dim,
                                   test.labels.data() + start, n);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
  }
  EvalResult r;
  if (total.count > 0) {
    r.loss = total.loss_sum / total.count;
    r.accuracy = static_cast<double>(total.correct) / total.count;
  }
  return r;
}

// Time spent in each phase since the last report.
struct PhaseTimes {
  absl::Duration data, compute, pull, push, wait;
  double loss_sum = 0;
  int64_t samples = 0;
  int64_t steps = 0;
  void Clear() { *this = PhaseTimes{}; }
};

}  // namespace

JobSpec Trainer::MakeJobSpec(const TrainerOptions& options,
                             const std::vector<std::string>& table_names,
                             const std::vector<std::vector<int64_t>>& shapes,
                             const std::vector<OptimizerConfig>& optimizers) {
  JobSpec job;
  job.set_mode(options.mode);
  job.set_num_trainers(options.num_trainers);
  job.set_max_staleness(options.mode == ASYNC ? options.max_staleness : -1);
  job.set_global_batch_size(int64_t{options.batch_size} * options.num_trainers);
  const int64_t block_size = options.config.block_size() > 0
                                 ? options.config.block_size()
                                 : kDefaultBlockSize;
  for (size_t i = 0; i < table_names.size(); ++i) {
    TableSpec* t = job.add_tables();
    t->set_name(table_names[i]);
    for (int64_t d : shapes[i]) t->add_shape(d);
    t->set_block_size(block_size);
    *t->mutable_optimizer() = optimizers[i];
  }
  return job;
}

Trainer::Trainer(TrainerOptions options,
                 std::vector<PsClientInterface*> servers)
    : options_(std::move(options)), servers_(std::move(servers)) {}

absl::Status Trainer::Run() {
  const TrainerOptions& o = options_;
  const int k = o.trainer_id;
  const bool sync = o.mode == SYNC;
  if (o.config.block_size() < 0 || o.config.block_size() > kMaxBlockSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: block_size must be in [1, ", kMaxBlockSize,
                     "], got ", o.config.block_size()));
  }

  // Data and model.
  const absl::Time load_start = absl::Now();
  ASSIGN_OR_RETURN(TrainData train,
                   LoadTrainData(o.config.data(), k, o.num_trainers));
  ASSIGN_OR_RETURN(IdxData test, LoadTestData(o.config.data()));
  const int num_classes =
      std::max(train.shard->num_classes(), test.num_classes);
  if (test.num_records > 0 && test.dim != train.shard->dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("test records have ", test.dim, " values, training ",
                     "records ", train.shard->dim()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   Model::Create(o.config, train.shard->dim(), num_classes));
  const int64_t steps_per_pass =
      ShardedDataset::StepsPerPass(train.records_per_trainer, o.batch_size);
  if (steps_per_pass <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch size ", o.batch_size, " exceeds the records of some trainer (",
        *std::min_element(train.records_per_trainer.begin(),
                          train.records_per_trainer.end()),
        "): no step would run"));
  }
  int64_t total_steps = steps_per_pass * o.num_passes;
  if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
  LOG(INFO) << "trainer " << k << "/" << o.num_trainers << ": "
            << train.shard->num_local_records() << " training records, "
            << test.num_records << " test records, " << model->num_parameters()
            << " parameters, " << steps_per_pass << " steps per pass, "
            << total_steps << " steps (" << (sync ? "sync" : "async")
            << "), loaded in "
            << absl::FormatDuration(absl::Now() - load_start);

  // Tables and the job.
  std::vector<DenseTableLayout> layouts;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<OptimizerConfig> optimizers;
  std::vector<float*> values;
  std::vector<const float*> grads;
  for (ParamTable& t : model->tables()) {
    names.push_back(t.name);
    shapes.push_back(t.shape);
    optimizers.push_back(t.layer->has_optimizer() ? t.layer->optimizer()
                                                  : o.config.optimizer());
    values.push_back(t.value.data());
    grads.push_back(t.grad.data());
  }
  const JobSpec job = MakeJobSpec(o, names, shapes, optimizers);
  for (const TableSpec& t : job.tables()) {
    layouts.push_back(DenseTableLayout{
        t.name(),
        static_cast<int64_t>(model->tables()[layouts.size()].value.size()),
        t.block_size()});
  }
  ParamClient client(servers_, k, layouts);
  RETURN_IF_ERROR(client.Register(o.incarnation));
  if (k == 0) {
    if (!o.load_dir.empty()) {
      RETURN_IF_ERROR(LoadModelParams(o.load_dir, &model->tables()));
      LOG(INFO) << "initial parameters from " << o.load_dir;
    } else {
      model->InitializeParameters(o.config.seed() != 0 ? o.config.seed() : 1);
    }
    std::vector<const float*> init(values.begin(), values.end());
    RETURN_IF_ERROR(client.InitJob(job, init));
  }
  RETURN_IF_ERROR(client.WaitUntilReady(job, o.ready_timeout));

  ASSIGN_OR_RETURN(auto metrics, MetricsWriter::Open(o.metrics_file));
  int64_t push_bytes = 0, pull_bytes = 0;
  const absl::Time train_start = absl::Now();
  absl::Duration train_time;  // excludes evaluation
  PhaseTimes window;
  absl::Time window_start = absl::Now(), last_draw = absl::InfinitePast();
  std::vector<float> x(static_cast<size_t>(o.batch_size) * train.shard->dim());
  std::vector<int32_t> labels(o.batch_size);
  int64_t step = 0;

  auto evaluate = [&](int pass, bool final) -> absl::Status {
    // Async: the final evaluation waits until every trainer has finished,
    // so that all report the accuracy of the final parameters.
    TransferStats ps;
    RETURN_IF_ERROR(client.Pull(sync ? step : 0, step, values, &ps,
                                !sync && final ? total_steps : 0));
    pull_bytes += ps.bytes;
    const EvalResult e = Evaluate(model.get(), test);
    result_.test_loss = e.loss;
    result_.test_accuracy = e.accuracy;
    const double secs = Seconds(train_time);
    metrics->Write(
        JsonLine("eval")
            .Add("trainer_id", k)
            .Add("pass", pass)
            .Add("step", step)
            .Add("final", final ? 1 : 0)
            .Add("test_loss", e.loss)
            .Add("test_accuracy", e.accuracy)
            .Add("push_bytes", push_bytes)
            .Add("pull_bytes", pull_bytes)
            .Add("train_seconds", secs)
            .Add("samples_per_s", secs > 0 ? step * o.batch_size / secs : 0.0));
    if (o.progress_bar) std::fputs("\n", stderr);
    LOG(INFO) << absl::StrFormat(
        "trainer %d pass %d step %d: test loss %.4f, test accuracy %.4f, "
        "pushed %.1f MB, pulled %.1f MB",
        k, pass, step, e.loss, e.accuracy, push_bytes / 1e6, pull_bytes / 1e6);
    return absl::OkStatus();
  };

  int pass = 0;
  for (; pass < o.num_passes && step < total_steps; ++pass) {
    train.shard->StartPass(pass, o.shuffle, o.shuffle_seed);
    for (int64_t i = 0; i < steps_per_pass && step < total_steps; ++i) {
      const absl::Time t0 = absl::Now();
      train.shard->GetBatch(i, o.batch_size, x.data(), labels.data());
      const absl::Time t1 = absl::Now();
      TransferStats pull;
      RETURN_IF_ERROR(client.Pull(sync ? step : 0, step, values, &pull));
      const absl::Time t2 = absl::Now();
      ASSIGN_OR_RETURN(BatchStats bs, model->TrainBatch(x.data(), labels.data(),
                                                        o.batch_size));
      const absl::Time t3 = absl::Now();
      TransferStats push;
      RETURN_IF_ERROR(client.Push(step, grads, &push));
      const absl::Time t4 = absl::Now();
      ++step;
      pull_bytes += pull.bytes;
      push_bytes += push.bytes;
      const absl::Duration wait = absl::Microseconds(pull.server_wait_us);
      window.data += t1 - t0;
      window.pull += std::max(absl::ZeroDuration(), (t2 - t1) - wait);
      window.wait += std::min(wait, t2 - t1);
      window.compute += t3 - t2;
      window.push += t4 - t3;
      window.loss_sum += bs.loss_sum;
      window.samples += bs.count;
      ++window.steps;
      train_time += t4 - t0;

      const bool report = step % o.log_every_steps == 0 || step == total_steps;
      if (report) {
        const double secs = Seconds(t4 - window_start);
        metrics->Write(JsonLine("step")
                           .Add("trainer_id", k)
                           .Add("pass", pass)
                           .Add("step", step)
                           .Add("train_loss", window.loss_sum / window.samples)
                           .Add("samples_per_s", window.samples / secs)
                           .Add("data_s", Seconds(window.data))
                           .Add("compute_s", Seconds(window.compute))
                           .Add("pull_s", Seconds(window.pull))
                           .Add("push_s", Seconds(window.push))
                           .Add("wait_s", Seconds(window.wait))
                           .Add("push_bytes", push_bytes)
                           .Add("pull_bytes", pull_bytes));
      }
      if (o.progress_bar &&
          (t4 - last_draw > absl::Milliseconds(200) || step == total_steps)) {
        last_draw = t4;
        const int64_t done_in_pass = i + 1;
        const int width = 30;
        const int filled =
            static_cast<int>(width * done_in_pass / steps_per_pass);
        std::fprintf(
            stderr,
            "\rtrainer %d pass %d/%d [%s%s] %lld/%lld loss %.4f %.0f "
            "samples/s ",
            k, pass + 1, o.num_passes, std::string(filled, '#').c_str(),
            std::string(width - filled, ' ').c_str(),
            static_cast<long long>(done_in_pass),
            static_cast<long long>(steps_per_pass),
            window.samples ? window.loss_sum / window.samples : 0.0,
            window.samples / std::max(1e-9, Seconds(t4 - window_start)));
      } else if (!o.progress_bar && report) {
        LOG(INFO) << absl::StrFormat(
            "trainer %d pass %d step %d/%d: loss %.4f, %.0f samples/s "
            "(data %.0f%%, compute %.0f%%, pull %.0f%%, push %.0f%%, wait "
            "%.0f%%)",
            k, pass, step, total_steps, window.loss_sum / window.samples,
            window.samples / Seconds(t4 - window_start),
            100 * Seconds(window.data) / Seconds(t4 - window_start),
            100 * Seconds(window.compute) / Seconds(t4 - window_start),
            100 * Seconds(window.pull) / Seconds(t4 - window_start),
            100 * Seconds(window.push) / Seconds(t4 - window_start),
            100 * Seconds(window.wait) / Seconds(t4 - window_start));
      }
      if (report) {
        window.Clear();
        window_start = absl::Now();
      }
    }
    const bool last = pass + 1 == o.num_passes || step >= total_steps;
    RETURN_IF_ERROR(evaluate(pass, last));
  }
  result_.steps = step;
  result_.push_bytes = push_bytes;
  result_.pull_bytes = pull_bytes;
  result_.train_seconds = Seconds(absl::Now() - train_start);

  if (k == 0 && !o.save_dir.empty()) {
    RETURN_IF_ERROR(SaveModel(o.save_dir, model->config(), model->tables()));
    LOG(INFO) << "model saved to " << o.save_dir;
  }
  return absl::OkStatus();
}

}  // namespace shardps
