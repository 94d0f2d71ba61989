#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "common/wire_limits.h"
#include "glog/logging.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "trainer/client/heartbeat.h"
#include "trainer/client/param_client.h"
#include "trainer/data/dataset_loader.h"
#include "trainer/input_pipeline.h"
#include "trainer/metrics.h"
#include "trainer/model/auc.h"
#include "trainer/model/model.h"
#include "trainer/model/saved_model.h"

namespace shardps {
namespace {

constexpr int64_t kDefaultBlockSize = 65536;
constexpr int kEvalBatch = 1000;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
  double auc = std::nan("");      // binary tasks
  double logloss = std::nan("");  // binary tasks
};

// Evaluates `model` on the whole test set of `input`, pulling what each
// batch needs (sparse rows) with `min_version`.
absl::StatusOr<EvalResult> Evaluate(Model* model, InputPipeline* input,
                                    ParamClient* client, int64_t min_version,
                                    int64_t step, int64_t* pull_bytes) {
  BatchStats total;
  const bool binary = model->num_classes() == 2;
  const int out_dim = model->output_dim();
  std::vector<float> probs, p1;
  std::vector<int32_t> labels;
  const int64_t n_test = input->test_records();
  for (int64_t start = 0; start < n_test; start += kEvalBatch) {
    const int n =
        static_cast<int>(std::min<int64_t>(kEvalBatch, n_test - start));
    input->LoadTestBatch(start, n);
    TransferStats ps;
    RETURN_IF_ERROR(input->PullRows(client, min_version, step, &ps));
    *pull_bytes += ps.bytes;
    probs.resize(static_cast<size_t>(n) * out_dim);
    ASSIGN_OR_RETURN(BatchStats s, model->Evaluate(input->x(), input->labels(),
                                                   n, probs.data()));
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
    total.count += s.count;
    if (binary) {
      for (int i = 0; i < n; ++i) {
        p1.push_back(out_dim == 1 ? probs[i] : probs[2 * i + 1]);
        labels.push_back(input->labels()[i]);
      }
    }
  }
  EvalResult r;
  if (total.count > 0) {
    r.loss = total.loss_sum / total.count;
    r.accuracy = static_cast<double>(total.correct) / total.count;
  }
  if (binary && !p1.empty()) {
    r.auc = Auc(p1, labels);
    r.logloss = LogLoss(p1, labels);
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
  job.set_replicas_to_aggregate(options.replicas_to_aggregate);
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

absl::StatusOr<int64_t> Trainer::SyncWithPservers(ParamClient* client) {
  const int k = options_.trainer_id;
  if (options_.mode == SYNC) {
    for (int attempt = 0;; ++attempt) {
      ASSIGN_OR_RETURN(std::vector<GetStatusResponse> st, client->Statuses());
      uint64_t g = 0;
      bool same = true;
      int64_t lowest = INT64_MAX, highest = 0;
      for (const GetStatusResponse& r : st) {
        g = std::max<uint64_t>(g, r.generation());
        same = same && r.generation() == st[0].generation() &&
               r.base_step() == st[0].base_step();
        lowest = std::min(lowest, r.min_version());
        highest = std::max(highest, r.max_version());
      }
      // In sync mode the pservers' versions differ by at most one step;
      // more means one lost its state without a new timeline.
      const bool versions_agree = highest - lowest <= 1;
      if (same && versions_agree) {
        client->set_generation(g);
        break;
      }
      // The pservers disagree (one restarted from its checkpoint): every
      // one rolls back to the newest checkpoint they all hold.
      std::vector<int64_t> common(st[0].checkpoint_steps().begin(),
                                  st[0].checkpoint_steps().end());
      std::vector<std::string> held;
      for (size_t s = 0; s < st.size(); ++s) {
        const auto& steps = st[s].checkpoint_steps();
        held.push_back(absl::StrCat(
            servers_[s]->address(), " generation ", st[s].generation(),
            " from step ", st[s].base_step(), " at versions ",
            st[s].min_version(), "-", st[s].max_version(), ", checkpoints [",
            absl::StrJoin(steps, ","), "]"));
        std::vector<int64_t> keep;
        for (int64_t c : common) {
          if (std::find(steps.begin(), steps.end(), c) != steps.end()) {
            keep.push_back(c);
          }
        }
        common = std::move(keep);
      }
      if (common.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot recover: the pservers are on different timelines and "
            "hold no checkpoint step in common (",
            absl::StrJoin(held, "; "),
            "); restart the job from a common checkpoint"));
      }
      const int64_t target = *std::max_element(common.begin(), common.end());
      // The newest generation can serve as the target only if every pserver
      // on it already stands at the target step (a restarted pserver, or a
      // rollback another trainer has begun); otherwise a new one is needed,
      // since a pserver never goes back to a generation it has been on.
      // (When they all say the same but their versions disagree, which a
      // pserver never reusing a generation should rule out, start a new one
      // too.)
      bool reuse = !same;
      for (const GetStatusResponse& r : st) {
        if (r.generation() == g && r.base_step() != target) reuse = false;
      }
      if (!reuse) ++g;
      LOG(WARNING) << "trainer " << k << ": pservers disagree ("
                   << absl::StrJoin(held, "; ")
                   << "): rolling every one back to step " << target
                   << ", generation " << g;
      absl::Status r = client->Rollback(target, g);
      if (r.ok()) continue;  // check again
      if (attempt >= 3) return r;
      LOG(WARNING) << "rollback failed, trying again: " << r;
    }
  }
  return client->Join(options_.incarnation);
}

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
  ASSIGN_OR_RETURN(
      std::unique_ptr<InputPipeline> input,
      InputPipeline::Create(o.config, k, o.num_trainers, o.batch_size));
  if (input->has_sparse_table() && !o.save_dir.empty()) {
    return absl::InvalidArgumentError(
        "--save_dir saves dense tables only; a model with a sparse input "
        "keeps its rows on the pservers");
  }
  std::unique_ptr<Backend> backend;
  if (o.use_gpu) {
    ASSIGN_OR_RETURN(backend, CreateCudaBackend(o.gpu_id));
  } else {
    backend = std::make_unique<CpuBackend>(o.cpu_threads);
  }
  LOG(INFO) << "trainer " << k << ": layers on " << backend->name();
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                   Model::Create(o.config, input->model_input_dim(),
                                 input->num_classes(), std::move(backend)));
  const std::vector<int64_t>& records = input->records_per_trainer();
  const int64_t steps_per_pass =
      ShardedDataset::StepsPerPass(records, o.batch_size);
  if (steps_per_pass <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch size ", o.batch_size, " exceeds the records of some trainer (",
        *std::min_element(records.begin(), records.end()),
        "): no step would run"));
  }
  int64_t total_steps = steps_per_pass * o.num_passes;
  if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);
  LOG(INFO) << "trainer " << k << "/" << o.num_trainers << ": "
            << input->local_records() << " training records, "
            << input->test_records() << " test records, "
            << model->num_parameters() << " dense parameters"
            << (input->has_sparse_table() ? " and a sparse table" : "") << ", "
            << steps_per_pass << " steps per pass, " << total_steps
            << " steps (" << (sync ? "sync" : "async") << "), loaded in "
            << absl::FormatDuration(absl::Now() - load_start);

  // Tables and the job: the model's dense tables, then the sparse one.
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
  // Threshold compression shares updates, not gradients (as DL4J does): the
  // trainer applies the learning rate and momentum to its own gradient,
  // encodes the update with a threshold on its scale, and the pservers add
  // the mean update (SGD with learning rate 1). See docs/compression.md.
  const bool share_updates = o.compression == "threshold";
  std::vector<OptimizerConfig> local_optimizers;
  std::vector<std::vector<float>> velocity, updates;
  std::vector<const float*> push_buffers = grads;
  if (share_updates) {
    for (size_t t = 0; t < optimizers.size(); ++t) {
      const OptimizerConfig& oc = optimizers[t];
      if ((oc.type() != OptimizerConfig::SGD &&
           oc.type() != OptimizerConfig::MOMENTUM) ||
          oc.schedule().type() != LrSchedule::CONSTANT ||
          !(oc.learning_rate() > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--compression=threshold shares updates computed on the trainer: "
            "table ",
            names[t],
            " needs an SGD or MOMENTUM optimizer with a constant, positive "
            "learning rate"));
      }
      local_optimizers.push_back(oc);
      OptimizerConfig sgd;
      sgd.set_type(OptimizerConfig::SGD);
      sgd.set_learning_rate(1.0f);
      optimizers[t] = sgd;
      velocity.emplace_back(model->tables()[t].grad.size(), 0.0f);
      updates.emplace_back(model->tables()[t].grad.size(), 0.0f);
      push_buffers[t] = updates.back().data();
    }
  }
  JobSpec job = MakeJobSpec(o, names, shapes, optimizers);
  for (const TableSpec& t : job.tables()) {
    layouts.push_back(DenseTableLayout{
        t.name(),
        static_cast<int64_t>(model->tables()[layouts.size()].value.size()),
        t.block_size()});
  }
  if (input->has_sparse_table()) {
    input->set_sparse_table_id(static_cast<uint32_t>(job.tables_size()));
    *job.add_tables() = input->SparseTableSpec();
  }
  ParamClient client(servers_, k, layouts);
  client.set_incarnation(o.incarnation);
  if (o.compression == "fp16") {
    client.set_encodings(FLOAT16, FLOAT16);
  } else if (o.compression == "bf16") {
    client.set_encodings(BFLOAT16, BFLOAT16);
  } else if (o.compression == "threshold") {
    ParamClient::ThresholdOptions t;
    t.adaptive = o.adaptive_threshold;
    t.threshold = o.updates_threshold;
    t.clip = o.residual_clipping;
    t.shake_frequency = o.shake_frequency;
    t.use_residual = o.use_residual;
    t.min_sparsity = o.min_sparsity;
    t.max_sparsity = o.max_sparsity;
    client.set_threshold_compression(t);
  } else if (o.compression != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--compression=", o.compression,
                     ": must be none, fp16, bf16 or threshold"));
  }
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
  ASSIGN_OR_RETURN(const int64_t start_step, SyncWithPservers(&client));
  if (start_step > 0) {
    LOG(INFO) << "trainer " << k << " joins the job at step " << start_step
              << " (pass " << start_step / steps_per_pass << ", batch "
              << start_step % steps_per_pass << ")";
  }
  if (k == 0 && o.checkpoint_every_steps > 0) {
    ASSIGN_OR_RETURN(std::vector<GetStatusResponse> st, client.Statuses());
    for (size_t s = 0; s < st.size(); ++s) {
      if (!st[s].checkpoints_enabled()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--checkpoint_every_steps needs every pserver started with "
            "--checkpoint_dir; pserver ",
            servers_[s]->address(), " has none"));
      }
    }
  }
  // Heartbeats start once this incarnation has joined: before that, a
  // pserver still knows the previous one.
  std::unique_ptr<Heartbeater> heartbeats;
  if (!o.heartbeat_servers.empty()) {
    heartbeats = std::make_unique<Heartbeater>(
        o.heartbeat_servers, k, o.incarnation, o.heartbeat_interval);
  }

  ASSIGN_OR_RETURN(auto metrics, MetricsWriter::Open(o.metrics_file));
  int64_t push_bytes = 0, pull_bytes = 0;
  const absl::Time train_start = absl::Now();
  absl::Duration train_time;  // excludes evaluation
  PhaseTimes window;
  absl::Time window_start = absl::Now(), last_draw = absl::InfinitePast();
  int64_t step = start_step;
  int64_t last_checkpoint = start_step;  // the step the job resumed from
  absl::Time last_ok = absl::Now();      // the end of the last good step

  auto evaluate = [&](int pass, bool final) -> absl::Status {
    // Async: the final evaluation waits until every trainer has finished
    // (and said so once all its pushes were acknowledged), so that all
    // report the accuracy of the final parameters.
    if (!sync && final) RETURN_IF_ERROR(client.MarkDone(total_steps));
    TransferStats ps;
    RETURN_IF_ERROR(client.Pull(sync ? step : 0, step, values, &ps,
                                !sync && final ? total_steps + 1 : 0));
    pull_bytes += ps.bytes;
    ASSIGN_OR_RETURN(const EvalResult e,
                     Evaluate(model.get(), input.get(), &client,
                              sync ? step : 0, step, &pull_bytes));
    result_.test_loss = e.loss;
    result_.test_accuracy = e.accuracy;
    result_.test_auc = e.auc;
    const double secs = Seconds(train_time);
    JsonLine line("eval");
    line.Add("trainer_id", k)
        .Add("pass", pass)
        .Add("step", step)
        .Add("final", final ? 1 : 0)
        .Add("test_loss", e.loss)
        .Add("test_accuracy", e.accuracy);
    if (!std::isnan(e.auc)) {
      line.Add("test_auc", e.auc).Add("test_logloss", e.logloss);
    }
    line.Add("push_bytes", push_bytes)
        .Add("pull_bytes", pull_bytes)
        .Add("train_seconds", secs)
        .Add("samples_per_s", secs > 0 ? step * o.batch_size / secs : 0.0);
    metrics->Write(line);
    if (o.progress_bar) std::fputs("\n", stderr);
    LOG(INFO) << absl::StrFormat(
        "trainer %d pass %d step %d: test loss %.4f, test accuracy %.4f%s, "
        "pushed %.1f MB, pulled %.1f MB",
        k, pass, step, e.loss, e.accuracy,
        std::isnan(e.auc) ? "" : absl::StrFormat(", test AUC %.4f", e.auc),
        push_bytes / 1e6, pull_bytes / 1e6);
    return absl::OkStatus();
  };

  // Sync: a pserver restarted from its checkpoint (or rolled back) answers
  // ABORTED; the job goes back to the newest checkpoint every pserver holds.
  auto recover = [&](const absl::Status& why) -> absl::Status {
    const absl::Time t0 = absl::Now();
    const int64_t from = step;
    LOG(WARNING) << "trainer " << k << " at step " << step << ": "
                 << why.message() << "; recovering";
    ASSIGN_OR_RETURN(step, SyncWithPservers(&client));
    if (share_updates) {
      client.ResetCompression();
      for (auto& v : velocity) std::fill(v.begin(), v.end(), 0.0f);
    }
    last_checkpoint = step;
    ++result_.recoveries;
    result_.steps_redone += std::max<int64_t>(0, from - step);
    const double secs = Seconds(absl::Now() - t0);
    metrics->Write(
        JsonLine("recovery")
            .Add("trainer_id", k)
            .Add("from_step", from)
            .Add("to_step", step)
            .Add("steps_lost", std::max<int64_t>(0, from - step))
            .Add("seconds", secs)
            .Add("stalled_seconds", Seconds(absl::Now() - last_ok))
            .Add("generation", static_cast<int64_t>(client.generation())));
    LOG(WARNING) << absl::StrFormat(
        "trainer %d recovered in %.2f s (%.1f s since its last step): "
        "generation %d, back to step %d from step %d",
        k, secs, Seconds(absl::Now() - last_ok), client.generation(), step,
        from);
    return absl::OkStatus();
  };

  int started_pass = -1;
  while (step < total_steps) {
    if (o.stop_requested != nullptr && o.stop_requested->load()) {
      absl::Status left = client.Leave(o.incarnation);
      LOG(WARNING) << "trainer " << k << " stopped by a signal at step " << step
                   << (left.ok() ? "; left the job" : "");
      return absl::CancelledError(
          absl::StrCat("stopped by a signal at step ", step));
    }
    if (heartbeats != nullptr) RETURN_IF_ERROR(heartbeats->status());
    const int pass = static_cast<int>(step / steps_per_pass);
    const int64_t i = step % steps_per_pass;
    if (pass != started_pass) {
      input->StartPass(pass, o.shuffle, o.shuffle_seed);
      started_pass = pass;
    }
    absl::Status step_status = [&]() -> absl::Status {
      const absl::Time t0 = absl::Now();
      input->LoadTrainBatch(i, o.batch_size);
      const absl::Time t1 = absl::Now();
      TransferStats pull, sparse_pull;
      RETURN_IF_ERROR(client.Pull(sync ? step : 0, step, values, &pull));
      RETURN_IF_ERROR(
          input->PullRows(&client, sync ? step : 0, step, &sparse_pull));
      pull.bytes += sparse_pull.bytes;
      pull.server_wait_us =
          std::max(pull.server_wait_us, sparse_pull.server_wait_us);
      // The chief asks for checkpoints between its pull and its push of a
      // step: in sync mode no block can move then.
      if (k == 0 && o.checkpoint_every_steps > 0 &&
          step % o.checkpoint_every_steps == 0 && step != last_checkpoint) {
        absl::Status c = client.Checkpoint(step);
        if (absl::IsAborted(c)) return c;
        if (c.ok()) {
          last_checkpoint = step;
        } else {
          LOG(WARNING) << "checkpoint of step " << step << " failed: " << c;
        }
      }
      // With replicas_to_aggregate the step may have gone ahead without
      // this trainer: tag the push with the version it computed on.
      const int64_t tag = sync && o.replicas_to_aggregate > 0
                              ? std::max(step, pull.min_version)
                              : step;
      const absl::Time t2 = absl::Now();
      model->SetDropoutStream(static_cast<uint64_t>(k) + 1, step);
      ASSIGN_OR_RETURN(BatchStats bs,
                       model->TrainBatch(input->x(), input->labels(),
                                         o.batch_size, input->input_grad()));
      const absl::Time t3 = absl::Now();
      // Sparse rows first: a pserver that has a trainer's dense push for a
      // step then also has its sparse push (the async final evaluation
      // relies on it).
      TransferStats push, sparse_push;
      RETURN_IF_ERROR(input->PushRows(&client, tag, sync, &sparse_push));
      if (share_updates) {
        // u = lr * v with v = mu * v + g (Nesterov: lr * (g + mu * v)).
        for (size_t t = 0; t < updates.size(); ++t) {
          const OptimizerConfig& oc = local_optimizers[t];
          const float lr = oc.learning_rate();
          const float mu =
              oc.type() == OptimizerConfig::MOMENTUM ? oc.momentum() : 0.0f;
          const float* g = grads[t];
          float* v = velocity[t].data();
          float* u = updates[t].data();
          for (size_t i = 0; i < updates[t].size(); ++i) {
            v[i] = mu * v[i] + g[i];
            u[i] = lr * (oc.nesterov() ? g[i] + mu * v[i] : v[i]);
          }
        }
      }
      RETURN_IF_ERROR(client.Push(tag, push_buffers, &push));
      if (share_updates && o.momentum_masking) {
        for (size_t t = 0; t < velocity.size(); ++t) {
          const std::vector<uint8_t>& mask = client.sent_mask(t);
          float* v = velocity[t].data();
          for (size_t i = 0; i < mask.size(); ++i) {
            if (mask[i]) v[i] = 0.0f;
          }
        }
      }
      push.bytes += sparse_push.bytes;
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
        JsonLine line("step");
        if (o.compression == "threshold") {
          const auto c = client.TakeCompressionStats();
          line.Add("threshold", c.threshold_count > 0
                                    ? c.threshold_sum / c.threshold_count
                                    : 0.0)
              .Add("sparsity",
                   c.elements > 0 ? static_cast<double>(c.selected) / c.elements
                                  : 0.0)
              .Add("threshold_messages", c.threshold_messages)
              .Add("bitmap_messages", c.bitmap_messages)
              .Add("empty_messages", c.empty_messages)
              .Add("nonfinite_messages", c.nonfinite_messages);
        }
        metrics->Write(line.Add("trainer_id", k)
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
      return absl::OkStatus();
    }();
    if (step_status.ok() &&
        (step % steps_per_pass == 0 || step == total_steps)) {
      const bool last = step == total_steps;
      // Sync: a trainer done with its steps leaves the barrier, so that the
      // others' last steps (with replicas_to_aggregate, their extra ones)
      // do not wait for it.
      if (last && sync) {
        absl::Status left = client.Leave(o.incarnation);
        if (!left.ok()) LOG(WARNING) << "leaving the job: " << left;
      }
      step_status = evaluate(pass, last);
    }
    if (step_status.ok()) last_ok = absl::Now();
    if (sync && absl::IsAborted(step_status)) {
      RETURN_IF_ERROR(recover(step_status));
      started_pass = -1;
      continue;
    }
    RETURN_IF_ERROR(step_status);
  }
  if (!sync) {
    absl::Status left = client.Leave(o.incarnation);
    if (!left.ok()) LOG(WARNING) << "leaving the job: " << left;
  }
  if (heartbeats != nullptr) heartbeats->Stop();
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
