#include "trainer/session/training_session.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"
#include "trainer/client/sparse_export.h"
#include "trainer/model/saved_model.h"
#include "trainer/recovery_planner.h"
#include "trainer/session/step_exchange.h"
#include "trainer/trainer.h"

namespace shardps {
namespace {

absl::Status Bad(const std::string& msg) {
  return absl::InvalidArgumentError(msg);
}

}  // namespace

TrainingSession::TrainingSession(TrainerOptions options,
                                 std::vector<PsClientInterface*> servers)
    : options_(std::move(options)),
      servers_(std::move(servers)),
      stamp_(options_.trainer_id, options_.incarnation) {}

TrainingSession::~TrainingSession() {
  // The router's thread calls the chief's rejoin, which reads params_ and
  // job_client_: stopped before they go.
  if (router_ != nullptr) router_->Stop();
  if (heartbeats_ != nullptr) heartbeats_->Stop();
}

absl::Status TrainingSession::CheckNotStarted(const std::string& name) const {
  if (started_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", name, ": tables are added before the job starts"));
  }
  if (name.empty()) return Bad("a table needs a name");
  const bool taken =
      std::find(names_.begin(), names_.end(), name) != names_.end() ||
      std::any_of(sparse_specs_.begin(), sparse_specs_.end(),
                  [&](const TableSpec& t) { return t.name() == name; });
  if (taken) return Bad(absl::StrCat("table ", name, " is added twice"));
  return absl::OkStatus();
}

absl::StatusOr<int> TrainingSession::AddDenseTable(
    const std::string& name, const std::vector<int64_t>& shape,
    const OptimizerConfig& optimizer) {
  RETURN_IF_ERROR(CheckNotStarted(name));
  if (shape.empty()) return Bad(absl::StrCat("table ", name, ": no shape"));
  int64_t size = 1;
  for (int64_t d : shape) {
    if (d <= 0 || size > (int64_t{1} << 40) / d) {
      return Bad(absl::StrCat("table ", name, ": dimension ", d,
                              " is not positive or the table is too large"));
    }
    size *= d;
  }
  if (optimizer.type() == OptimizerConfig::LARS) {
    const char* why = !sync() ? "--mode=async"
                      : options_.replicas_to_aggregate > 0
                          ? "--replicas_to_aggregate"
                      : options_.compression == Compression::kThreshold
                          ? "--compression=threshold"
                          : nullptr;
    if (why != nullptr) {
      return Bad(absl::StrCat(
          "table ", name, " has LARS, which does not work with ", why,
          ": its trust ratio needs the whole table's norms at each sync "
          "step (docs/tuning.md, \"LARS\")"));
    }
    lars_tables_.resize(names_.size() + 1);
    lars_tables_.back() = true;
  } else if (!lars_tables_.empty()) {
    lars_tables_.push_back(false);
  }
  names_.push_back(name);
  shapes_.push_back(shape);
  optimizers_.push_back(optimizer);
  return static_cast<int>(names_.size()) - 1;
}

absl::StatusOr<int> TrainingSession::AddSparseTable(
    const std::string& name, const SparseTableOptions& sparse,
    const OptimizerConfig& optimizer) {
  RETURN_IF_ERROR(CheckNotStarted(name));
  if (sparse.dim() < 1 || sparse.dim() > 65536) {
    return Bad(absl::StrCat("sparse table ", name, ": dim ", sparse.dim(),
                            " is not in [1, 65536]"));
  }
  if (optimizer.type() == OptimizerConfig::LARS) {
    return Bad(absl::StrCat("sparse table ", name,
                            " has LARS, which is for dense tables"));
  }
  TableSpec t;
  t.set_name(name);
  t.set_kind(TableSpec::SPARSE);
  *t.mutable_sparse() = sparse;
  *t.mutable_optimizer() = optimizer;
  sparse_specs_.push_back(std::move(t));
  return static_cast<int>(sparse_specs_.size()) - 1;
}

absl::Status TrainingSession::MakeClients() {
  const TrainerOptions& o = options_;
  if (o.config.block_size() < 0 || o.config.block_size() > kMaxBlockSize) {
    return Bad(absl::StrCat("block_size must be in [1, ", kMaxBlockSize,
                            "], got ", o.config.block_size()));
  }
  std::vector<OptimizerConfig> pushed = optimizers_;
  std::vector<size_t> sizes;
  for (const auto& shape : shapes_) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    sizes.push_back(static_cast<size_t>(n));
  }
  if (o.compression == Compression::kThreshold) {
    threshold_ = o.threshold;
    if (threshold_.threshold == 0) {
      for (const OptimizerConfig& oc : optimizers_) {
        threshold_.table_thresholds.push_back(
            UpdateSharing::DefaultThreshold(oc));
      }
    }
    ASSIGN_OR_RETURN(sharing_, UpdateSharing::Create(
                                   names_, &pushed, sizes, o.momentum_masking,
                                   int64_t{o.batch_size} * o.num_trainers));
  }
  job_ = MakeJobSpec(o, names_, shapes_, pushed);
  for (size_t t = 0; t < names_.size(); ++t) {
    layouts_.push_back(DenseTableLayout{names_[t],
                                        static_cast<int64_t>(sizes[t]),
                                        job_.tables(t).block_size()});
  }
  for (const TableSpec& t : sparse_specs_) *job_.add_tables() = t;
  ASSIGN_OR_RETURN(JobClients clients,
                   MakeJobClients(o, servers_, &stamp_, layouts_, threshold_));
  job_client_ = std::move(clients.job);
  router_ = std::move(clients.router);
  params_ = std::move(clients.params);
  sparse_ = std::move(clients.sparse);
  return absl::OkStatus();
}

absl::Status TrainingSession::Start(const std::vector<const float*>& initial,
                                    int64_t steps_per_pass) {
  if (started_) return absl::FailedPreconditionError("the job has started");
  if (names_.empty() && sparse_specs_.empty()) {
    return Bad("the job has no table (a model without parameters?)");
  }
  if (initial.size() != names_.size()) {
    return Bad(absl::StrCat(initial.size(), " initial values for ",
                            names_.size(), " dense tables"));
  }
  if (steps_per_pass < 0) return Bad("steps_per_pass must be >= 0");
  const TrainerOptions& o = options_;
  const int k = o.trainer_id;
  RETURN_IF_ERROR(MakeClients());
  started_ = true;
  RETURN_IF_ERROR(job_client_->Register());
  if (k == 0 && !o.load_dir.empty()) {
    std::vector<ParamTable> saved = SavedTables(initial);
    RETURN_IF_ERROR(LoadModelParams(o.load_dir, &saved));
    std::vector<const float*> loaded;
    for (const ParamTable& t : saved) loaded.push_back(t.value.data());
    LOG(INFO) << "initial values from " << o.load_dir;
    RETURN_IF_ERROR(job_client_->InitJob(job_, params_->chunks(), loaded));
  } else if (k == 0) {
    RETURN_IF_ERROR(job_client_->InitJob(job_, params_->chunks(), initial));
  }
  RETURN_IF_ERROR(job_client_->WaitUntilReady(job_, o.ready_timeout));
  ASSIGN_OR_RETURN(step_, JoinAgreedTimeline(job_client_.get(), &stamp_, k,
                                             sync(), o.ready_timeout));
  shardps::OpenValueLanes(options_, params_.get(), servers_.size());
  if (step_ > 0)
    LOG(INFO) << "trainer " << k << " joins the job at step " << step_;
  checkpoints_ = std::make_unique<CheckpointRequester>(
      job_client_.get(), o.checkpoint_every_steps, k == 0, o.observer,
      /*k_of_n=*/o.replicas_to_aggregate > 0);
  RETURN_IF_ERROR(checkpoints_->CheckPservers());
  checkpoints_->ResumedAt(step_);
  StepExchange::Tables tables{names_, lars_tables_, {}, {}};
  for (const TableSpec& t : sparse_specs_) {
    tables.sparse_names.push_back(t.name());
    tables.sparse_dims.push_back(t.sparse().dim());
  }
  exchange_ = std::make_unique<StepExchange>(
      std::move(tables), sync(), params_.get(), sparse_.get(),
      checkpoints_.get(), sharing_.get());
  if (router_ != nullptr && k == 0) {
    router_->set_rejoin([this](int s) {
      return job_client_->Rejoin(static_cast<size_t>(s), job_,
                                 params_->chunks());
    });
  }
  if (!o.heartbeat_servers.empty()) {
    heartbeats_ = std::make_unique<Heartbeater>(
        o.heartbeat_servers, k, o.incarnation, o.heartbeat_interval);
    heartbeats_->Start();
  }
  ASSIGN_OR_RETURN(metrics_, MetricsWriter::Open(o.metrics_file));
  steps_per_pass_ = steps_per_pass;
  ProgressReporter::Options p;
  p.trainer_id = k;
  p.num_passes = o.num_passes;
  p.log_every_steps = o.log_every_steps;
  p.progress_bar = o.progress_bar && steps_per_pass > 0;
  int64_t total = steps_per_pass > 0 ? steps_per_pass * o.num_passes : 0;
  if (o.max_steps > 0)
    total = total > 0 ? std::min(total, o.max_steps) : o.max_steps;
  progress_ = std::make_unique<ProgressReporter>(
      p, std::max<int64_t>(steps_per_pass, 1), total, metrics_.get());
  if (o.observer != nullptr) o.observer->Ready(step_);
  last_end_ = absl::Now();
  LOG(INFO) << "trainer " << k << "/" << o.num_trainers << ": " << names_.size()
            << " dense and " << sparse_specs_.size() << " sparse tables ("
            << (sync() ? "sync" : "async") << "), starting at step " << step_;
  return absl::OkStatus();
}

int TrainingSession::shared_memory_servers() const {
  return params_ != nullptr ? params_->shared_servers() : 0;
}

absl::Status TrainingSession::PullDense(const std::vector<float*>& values) {
  if (!started_)
    return absl::FailedPreconditionError("the job has not started");
  if (values.size() != layouts_.size()) {
    return Bad(absl::StrCat(values.size(), " buffers for ", layouts_.size(),
                            " dense tables"));
  }
  if (heartbeats_ != nullptr) RETURN_IF_ERROR(heartbeats_->status());
  const absl::Time t0 = absl::Now();
  TransferStats stats;
  RETURN_IF_ERROR(params_->Pull(sync() ? step_ : 0, step_, values, &stats));
  pull_bytes_ += stats.bytes;
  pulled_ += absl::Now() - t0;
  return absl::OkStatus();
}

absl::Status TrainingSession::PullSparse(int table,
                                         absl::Span<const uint64_t> keys,
                                         float* rows) {
  if (!started_)
    return absl::FailedPreconditionError("the job has not started");
  if (table < 0 || table >= static_cast<int>(sparse_specs_.size())) {
    return Bad(absl::StrCat("no sparse table ", table));
  }
  const absl::Time t0 = absl::Now();
  const int dim = sparse_specs_[table].sparse().dim();
  std::vector<SparseTransfer> t = {
      {static_cast<uint32_t>(layouts_.size() + table), dim, keys, rows,
       nullptr}};
  TransferStats stats;
  RETURN_IF_ERROR(sparse_->Pull(sync() ? step_ : 0, step_, t, &stats));
  pull_bytes_ += stats.bytes;
  pulled_ += absl::Now() - t0;
  return absl::OkStatus();
}

absl::Status TrainingSession::PushSparse(int table,
                                         absl::Span<const uint64_t> keys,
                                         absl::Span<const float> grads) {
  if (!started_)
    return absl::FailedPreconditionError("the job has not started");
  return exchange_->QueueSparse(table, keys, grads);
}

absl::Status TrainingSession::PushDenseEarly(int table, const float* grad) {
  if (!started_ || finished_) {
    return absl::FailedPreconditionError(finished_ ? "the job has finished"
                                                   : "the job has not started");
  }
  return exchange_->PushDenseEarly(step_, table, grad);
}

absl::StatusOr<StepOutcome> TrainingSession::EndStep(
    const std::vector<const float*>& grads,
    const std::vector<float*>* next_values,
    const std::vector<SparseFetch>* next_rows, double loss_sum,
    int64_t samples) {
  if (!started_ || finished_) {
    return absl::FailedPreconditionError(finished_ ? "the job has finished"
                                                   : "the job has not started");
  }
  if (grads.size() != layouts_.size() ||
      (next_values != nullptr && next_values->size() != layouts_.size())) {
    return Bad(absl::StrCat("gradients for ", grads.size(), " of ",
                            layouts_.size(), " dense tables"));
  }
  std::vector<SparseTransfer> fetch;
  if (next_rows != nullptr) {
    ASSIGN_OR_RETURN(fetch, exchange_->Fetches(*next_rows));
  }
  const absl::Time t1 = absl::Now();
  TransferStats push, pull;
  absl::Status st =
      exchange_->End(step_, grads, next_values, fetch, &push, &pull);
  if (!st.ok()) {
    if (sync() && absl::IsAborted(st)) {
      RETURN_IF_ERROR(Recover(st));
      return StepOutcome{step_, true};
    }
    CancelIfFatal(st);
    return st;
  }
  const absl::Time t2 = absl::Now();
  ++step_;
  push_bytes_ += push.bytes;
  pull_bytes_ += pull.bytes;
  StepTimes times;
  times.compute = std::max(absl::ZeroDuration(), t1 - last_end_ - pulled_);
  times.pull = pulled_;
  times.wait = std::min(absl::Microseconds(pull.server_wait_us), t2 - t1);
  times.push = (t2 - t1) - times.wait;  // with the checkpoint request
  const int64_t pass = steps_per_pass_ > 0 ? (step_ - 1) / steps_per_pass_ : 0;
  Report(pass, times, loss_sum, samples, push.bytes, pull.bytes);
  train_time_ += t2 - last_end_;
  last_end_ = t2;
  pulled_ = absl::ZeroDuration();
  return StepOutcome{step_, false};
}

void TrainingSession::Report(int64_t pass, const StepTimes& times,
                             double loss_sum, int64_t samples,
                             int64_t push_bytes, int64_t pull_bytes) {
  progress_->StepDone(step_, static_cast<int>(pass), times, loss_sum, samples,
                      push_bytes_, pull_bytes_, params_->threshold_encoder());
  if (options_.observer != nullptr) {
    options_.observer->StepDone(StepReport{step_, static_cast<int>(pass), times,
                                           loss_sum, samples, push_bytes,
                                           pull_bytes});
  }
}

absl::Status TrainingSession::Recover(const absl::Status& why) {
  const int k = options_.trainer_id;
  const int64_t from = step_;
  const absl::Time t0 = absl::Now();
  LOG(WARNING) << "trainer " << k << " at step " << step_ << ": "
               << why.message() << "; recovering";
  exchange_->Drop();
  ASSIGN_OR_RETURN(step_, JoinAgreedTimeline(job_client_.get(), &stamp_, k,
                                             sync(), options_.ready_timeout));
  // A restarted pserver holds none of the regions or lanes.
  shardps::OpenValueLanes(options_, params_.get(), servers_.size());
  if (sharing_ != nullptr) {
    params_->threshold_encoder()->Reset();
    sharing_->Reset();
  }
  checkpoints_->ResumedAt(step_);
  if (options_.observer != nullptr) options_.observer->Recovered(from, step_);
  metrics_->Write(
      JsonLine("recovery")
          .Add("trainer_id", k)
          .Add("from_step", from)
          .Add("to_step", step_)
          .Add("steps_lost", std::max<int64_t>(0, from - step_))
          .Add("seconds", absl::ToDoubleSeconds(absl::Now() - t0))
          .Add("generation", static_cast<int64_t>(stamp_.generation())));
  LOG(WARNING) << absl::StrFormat(
      "trainer %d recovered in %.2f s: generation %d, back to step %d from "
      "step %d",
      k, absl::ToDoubleSeconds(absl::Now() - t0), stamp_.generation(), step_,
      from);
  last_end_ = absl::Now();
  pulled_ = absl::ZeroDuration();
  return absl::OkStatus();
}

void TrainingSession::CancelIfFatal(const absl::Status& why) {
  LOG(WARNING) << "trainer " << options_.trainer_id << ": step " << step_
               << " failed: " << why << "; cancelling the calls in flight";
  for (PsClientInterface* s : servers_) s->CancelCalls();
  for (PsClientInterface* s : options_.failover_servers) s->CancelCalls();
  if (params_ != nullptr) params_->CancelSharedCalls();
}

void TrainingSession::Evaluated(int pass, bool final, double loss,
                                double accuracy, double auc) {
  if (!started_) return;
  if (options_.observer != nullptr) {
    options_.observer->Evaluated(
        EvalReport{pass, step_, final, loss, accuracy, auc, 0});
  }
  const double secs = absl::ToDoubleSeconds(train_time_);
  JsonLine line("eval");
  line.Add("trainer_id", options_.trainer_id)
      .Add("pass", pass)
      .Add("step", step_)
      .Add("final", final ? 1 : 0)
      .Add("test_loss", loss)
      .Add("test_accuracy", accuracy);
  if (!std::isnan(auc)) line.Add("test_auc", auc);
  line.Add("push_bytes", push_bytes_)
      .Add("pull_bytes", pull_bytes_)
      .Add("train_seconds", secs);
  metrics_->Write(line);
  progress_->EndLine();
  LOG(INFO) << absl::StrFormat(
      "trainer %d pass %d step %d: test loss %.4f, test accuracy %.4f%s, "
      "pushed %.1f MB, pulled %.1f MB",
      options_.trainer_id, pass, step_, loss, accuracy,
      std::isnan(auc) ? "" : absl::StrFormat(", test AUC %.4f", auc),
      push_bytes_ / 1e6, pull_bytes_ / 1e6);
}

std::vector<ParamTable> TrainingSession::SavedTables(
    const std::vector<const float*>& values) const {
  std::vector<ParamTable> tables;
  for (size_t t = 0; t < layouts_.size(); ++t) {
    ParamTable p;
    p.name = names_[t];
    p.shape = shapes_[t];
    p.layer = nullptr;  // a Python model's table has no C++ layer
    p.value.assign(values[t], values[t] + layouts_[t].num_values);
    tables.push_back(std::move(p));
  }
  return tables;
}

absl::Status TrainingSession::Save(
    const std::vector<const float*>& values) const {
  if (options_.trainer_id != 0 || options_.save_dir.empty()) {
    return absl::OkStatus();
  }
  if (values.size() != layouts_.size()) {
    return Bad(absl::StrCat(values.size(), " buffers for ", layouts_.size(),
                            " dense tables"));
  }
  ModelConfig config;
  config.set_name("python");
  RETURN_IF_ERROR(SaveModel(options_.save_dir, config, SavedTables(values)));
  RETURN_IF_ERROR(SaveSparseTables(job_client_.get(), job_, sync() ? step_ : 0,
                                   options_.save_dir));
  LOG(INFO) << "model saved to " << options_.save_dir;
  return absl::OkStatus();
}

absl::Status TrainingSession::Finish() {
  if (!started_ || finished_) return absl::OkStatus();
  finished_ = true;
  absl::Status s;
  if (!sync()) s = params_->MarkDone(step_);
  absl::Status left = job_client_->Leave();
  if (!left.ok()) LOG(WARNING) << "leaving the job: " << left;
  if (heartbeats_ != nullptr) heartbeats_->Stop();
  if (options_.observer != nullptr) options_.observer->Stopped();
  if (s.ok() && options_.wait_for_trainers > absl::ZeroDuration()) {
    s = job_client_->FinishAndWait(options_.num_trainers,
                                   options_.wait_for_trainers,
                                   options_.stop_requested);
  }
  return s;
}

void TrainingSession::Abandon() {
  if (!started_ || finished_) return;
  finished_ = true;
  absl::Status left = job_client_->Leave();
  if (!left.ok()) LOG(WARNING) << "leaving the job: " << left;
  if (heartbeats_ != nullptr) heartbeats_->Stop();
  if (options_.observer != nullptr) options_.observer->Stopped();
}

}  // namespace shardps
