#include "trainer/core/training_session.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "common/model_export/saved_model.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"
#include "trainer/client/sparse_export.h"
#include "trainer/core/job_clients.h"
#include "trainer/core/recovery_planner.h"
#include "trainer/core/step_exchange.h"

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
  if (!started_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("table ", name, ": tables are added before the job starts"));
}

absl::StatusOr<int> TrainingSession::AddDenseTable(
    const std::string& name, const std::vector<int64_t>& shape,
    const OptimizerConfig& optimizer) {
  RETURN_IF_ERROR(CheckNotStarted(name));
  return tables_.AddDense(name, shape, optimizer);
}

absl::StatusOr<int> TrainingSession::AddSparseTable(
    const std::string& name, const SparseTableOptions& sparse,
    const OptimizerConfig& optimizer) {
  RETURN_IF_ERROR(CheckNotStarted(name));
  return tables_.AddSparse(name, sparse, optimizer);
}

absl::Status TrainingSession::MakeClients() {
  ASSIGN_OR_RETURN(DescribedJob d, tables_.Build());
  job_ = std::move(d.job);
  layouts_ = std::move(d.layouts);
  threshold_ = d.threshold;
  sharing_ = std::move(d.sharing);
  ASSIGN_OR_RETURN(
      JobClients clients,
      MakeJobClients(options_, servers_, &stamp_, layouts_, threshold_));
  job_client_ = std::move(clients.job);
  router_ = std::move(clients.router);
  params_ = std::move(clients.params);
  sparse_ = std::move(clients.sparse);
  return absl::OkStatus();
}

absl::Status TrainingSession::Start(const std::vector<const float*>& initial,
                                    int64_t steps_per_pass) {
  if (started_) return absl::FailedPreconditionError("the job has started");
  const std::vector<std::string>& names = tables_.dense_names();
  if (initial.size() != names.size()) {
    return Bad(absl::StrCat(initial.size(), " initial values for ",
                            names.size(), " dense tables"));
  }
  if (steps_per_pass < 0) return Bad("steps_per_pass must be >= 0");
  RETURN_IF_ERROR(MakeClients());
  started_ = true;
  RETURN_IF_ERROR(JoinJob(initial));
  RETURN_IF_ERROR(StartStepParts());
  RETURN_IF_ERROR(StartReports(steps_per_pass));
  const TrainerOptions& o = options_;
  LOG(INFO) << "trainer " << o.trainer_id << "/" << o.num_trainers << ": "
            << names.size() << " dense and " << tables_.sparse_specs().size()
            << " sparse tables (" << (sync() ? "sync" : "async")
            << "), starting at step " << step_;
  if (joined_finished_job_) {
    LOG(WARNING) << "trainer " << o.trainer_id << ": the job has run all its "
                 << total_steps_ << " steps already (the pservers hold step "
                 << step_ << "): nothing to train (another --job_id, or "
                 << "empty --checkpoint_dir folders, starts a new run)";
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::InitJob(
    const std::vector<const float*>& initial) {
  const std::string& dir = options_.load_dir;
  if (dir.empty()) {
    return job_client_->InitJob(job_, params_->chunks(), initial);
  }
  std::vector<std::vector<float>> loaded(layouts_.size());
  std::vector<DenseTensorSlot> slots;
  for (size_t t = 0; t < layouts_.size(); ++t) {
    loaded[t].resize(layouts_[t].num_values);
    slots.push_back(DenseTensorSlot{layouts_[t].name, tables_.dense_shapes()[t],
                                    absl::MakeSpan(loaded[t])});
  }
  RETURN_IF_ERROR(LoadModelParams(dir, slots));
  LOG(INFO) << "initial values from " << dir;
  std::vector<const float*> values;
  for (const std::vector<float>& v : loaded) values.push_back(v.data());
  return job_client_->InitJob(job_, params_->chunks(), values);
}

absl::Status TrainingSession::JoinJob(
    const std::vector<const float*>& initial) {
  const TrainerOptions& o = options_;
  RETURN_IF_ERROR(job_client_->Register());
  if (o.trainer_id == 0) RETURN_IF_ERROR(InitJob(initial));
  RETURN_IF_ERROR(job_client_->WaitUntilReady(job_, o.ready_timeout));
  ASSIGN_OR_RETURN(step_,
                   JoinAgreedTimeline(job_client_.get(), &stamp_, o.trainer_id,
                                      sync(), o.ready_timeout));
  OpenValueLanes();
  if (step_ > 0) {
    LOG(INFO) << "trainer " << o.trainer_id << " joins the job at step "
              << step_;
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::StartStepParts() {
  const TrainerOptions& o = options_;
  const int k = o.trainer_id;
  checkpoints_ = std::make_unique<CheckpointRequester>(
      job_client_.get(), o.checkpoint_every_steps, k == 0, o.observer,
      /*k_of_n=*/o.replicas_to_aggregate > 0);
  RETURN_IF_ERROR(checkpoints_->CheckPservers());
  checkpoints_->ResumedAt(step_);
  StepExchange::Tables tables{tables_.dense_names(), tables_.lars(), {}, {}};
  for (const TableSpec& t : tables_.sparse_specs()) {
    tables.sparse_names.push_back(t.name());
    tables.sparse_dims.push_back(t.sparse().dim());
  }
  exchange_ = std::make_unique<StepExchange>(
      std::move(tables), sync(), params_.get(), sparse_.get(),
      checkpoints_.get(), sharing_.get());
  if (router_ != nullptr && k == 0) {
    // The chief brings pservers that come back into the job.
    router_->set_rejoin([this](int s) {
      return job_client_->Rejoin(static_cast<size_t>(s), job_,
                                 params_->chunks());
    });
  }
  // Heartbeats start once this incarnation has joined: before that, a
  // pserver still knows the previous one.
  if (!o.heartbeat_servers.empty()) {
    heartbeats_ = std::make_unique<Heartbeater>(
        o.heartbeat_servers, k, o.incarnation, o.heartbeat_interval);
    heartbeats_->Start();
  }
  return absl::OkStatus();
}

absl::Status TrainingSession::StartReports(int64_t steps_per_pass) {
  const TrainerOptions& o = options_;
  ASSIGN_OR_RETURN(metrics_, JsonLinesWriter::Open(o.metrics_file));
  steps_per_pass_ = steps_per_pass;
  total_steps_ = steps_per_pass > 0 ? steps_per_pass * o.num_passes : 0;
  if (o.max_steps > 0) {
    total_steps_ =
        total_steps_ > 0 ? std::min(total_steps_, o.max_steps) : o.max_steps;
  }
  joined_finished_job_ = total_steps_ > 0 && step_ >= total_steps_;
  ProgressReporter::Options p;
  p.trainer_id = o.trainer_id;
  p.num_passes = o.num_passes;
  p.log_every_steps = o.log_every_steps;
  p.progress_bar = o.progress_bar && steps_per_pass > 0;
  p.network = [this] {
    NetworkPicture n;
    n.servers = static_cast<int>(servers_.size());
    n.shared_servers = params_->shared_servers();
    n.lane_servers = params_->tcp_lane_servers();
    n.compression = options_.compression;
    n.compressed_pulls = options_.compressed_pulls;
    return n;
  };
  progress_ = std::make_unique<ProgressReporter>(
      p, std::max<int64_t>(steps_per_pass, 1), total_steps_, metrics_.get());
  if (o.observer != nullptr) o.observer->Ready(step_);
  last_end_ = absl::Now();
  last_ok_ = last_end_;
  return absl::OkStatus();
}

void TrainingSession::OpenValueLanes() {
  shardps::OpenValueLanes(options_, params_.get(), servers_.size());
}

absl::Status TrainingSession::HeartbeatStatus() const {
  return heartbeats_ != nullptr ? heartbeats_->status() : absl::OkStatus();
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
  const std::vector<TableSpec>& sparse = tables_.sparse_specs();
  if (table < 0 || table >= static_cast<int>(sparse.size())) {
    return Bad(absl::StrCat("no sparse table ", table));
  }
  const absl::Time t0 = absl::Now();
  const int dim = sparse[table].sparse().dim();
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
    CancelIfFatal(st);
    if (!sync() || !absl::IsAborted(st)) return st;
    RETURN_IF_ERROR(Recover(st));
    return StepOutcome{step_, true};
  }
  const absl::Time t2 = absl::Now();
  StepTimes times;
  times.compute = std::max(absl::ZeroDuration(), t1 - last_end_ - pulled_);
  times.pull = pulled_;
  times.wait = std::min(absl::Microseconds(pull.server_wait_us), t2 - t1);
  times.push = (t2 - t1) - times.wait;  // with the checkpoint request
  const int pass =
      steps_per_pass_ > 0 ? static_cast<int>(step_ / steps_per_pass_) : 0;
  StepDone(pass, times, loss_sum, samples, push.bytes, pull.bytes,
           t2 - last_end_);
  return StepOutcome{step_, false};
}

void TrainingSession::StepDone(int pass, const StepTimes& times,
                               double loss_sum, int64_t samples,
                               int64_t push_bytes, int64_t pull_bytes,
                               absl::Duration took) {
  ++step_;
  push_bytes_ += push_bytes;
  pull_bytes_ += pull_bytes;
  samples_ += samples;
  train_time_ += took;
  progress_->StepDone(step_, pass, times, loss_sum, samples, push_bytes_,
                      pull_bytes_, params_->threshold_encoder());
  if (options_.observer != nullptr) {
    options_.observer->StepDone(StepReport{step_, pass, times, loss_sum,
                                           samples, push_bytes, pull_bytes});
  }
  last_end_ = absl::Now();
  last_ok_ = last_end_;
  pulled_ = absl::ZeroDuration();
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
  OpenValueLanes();  // a restarted pserver holds none of the regions or lanes
  if (sharing_ != nullptr) {
    params_->threshold_encoder()->Reset();
    sharing_->Reset();
  }
  checkpoints_->ResumedAt(step_);
  ++recoveries_;
  steps_redone_ += std::max<int64_t>(0, from - step_);
  if (options_.observer != nullptr) options_.observer->Recovered(from, step_);
  WriteRecoveryLine(from, absl::Now() - t0, absl::Now() - last_ok_);
  last_end_ = absl::Now();
  pulled_ = absl::ZeroDuration();
  return absl::OkStatus();
}

void TrainingSession::WriteRecoveryLine(int64_t from, absl::Duration took,
                                        absl::Duration stalled) {
  const int k = options_.trainer_id;
  const double secs = absl::ToDoubleSeconds(took);
  const double stalled_secs = absl::ToDoubleSeconds(stalled);
  metrics_->Write(
      JsonLine("recovery")
          .Add("trainer_id", k)
          .Add("from_step", from)
          .Add("to_step", step_)
          .Add("steps_lost", std::max<int64_t>(0, from - step_))
          .Add("seconds", secs)
          .Add("stalled_seconds", stalled_secs)
          .Add("generation", static_cast<int64_t>(stamp_.generation())));
  LOG(WARNING) << absl::StrFormat(
      "trainer %d recovered in %.2f s (%.1f s since its last step): "
      "generation %d, back to step %d from step %d",
      k, secs, stalled_secs, stamp_.generation(), step_, from);
}

void TrainingSession::CancelIfFatal(const absl::Status& why) {
  if (sync() && absl::IsAborted(why)) return;  // the run recovers from it
  LOG(WARNING) << "trainer " << options_.trainer_id << ": step " << step_
               << " failed, stopping: " << why
               << "; cancelling the calls still in flight";
  for (PsClientInterface* s : servers_) s->CancelCalls();
  for (PsClientInterface* s : options_.failover_servers) s->CancelCalls();
  if (params_ != nullptr) params_->CancelSharedCalls();
}

void TrainingSession::Evaluated(const Evaluation& e) {
  if (!started_) return;
  const TrainerOptions& o = options_;
  pull_bytes_ += e.pull_bytes;
  if (o.observer != nullptr) {
    o.observer->Evaluated(EvalReport{e.pass, step_, e.final, e.loss, e.accuracy,
                                     e.auc, e.pull_bytes});
  }
  const double secs = absl::ToDoubleSeconds(train_time_);
  JsonLine line("eval");
  line.Add("trainer_id", o.trainer_id)
      .Add("pass", e.pass)
      .Add("step", step_)
      .Add("final", e.final ? 1 : 0)
      .Add("test_loss", e.loss)
      .Add("test_accuracy", e.accuracy);
  if (!std::isnan(e.auc)) line.Add("test_auc", e.auc);
  if (!std::isnan(e.logloss)) line.Add("test_logloss", e.logloss);
  line.Add("push_bytes", push_bytes_)
      .Add("pull_bytes", pull_bytes_)
      .Add("train_seconds", secs)
      .Add("samples_per_s", secs > 0 ? samples_ / secs : 0.0);
  metrics_->Write(line);
  progress_->EndLine();
  LOG(INFO) << absl::StrFormat(
      "trainer %d pass %d step %d: test loss %.4f, test accuracy %.4f%s, "
      "pushed %.1f MB, pulled %.1f MB",
      o.trainer_id, e.pass, step_, e.loss, e.accuracy,
      std::isnan(e.auc) ? "" : absl::StrFormat(", test AUC %.4f", e.auc),
      push_bytes_ / 1e6, pull_bytes_ / 1e6);
  last_ok_ = absl::Now();
}

absl::Status TrainingSession::Save(const std::vector<const float*>& values,
                                   const ModelConfig* config) const {
  if (options_.trainer_id != 0 || options_.save_dir.empty()) {
    return absl::OkStatus();
  }
  if (values.size() != layouts_.size()) {
    return Bad(absl::StrCat(values.size(), " buffers for ", layouts_.size(),
                            " dense tables"));
  }
  ModelConfig named;
  named.set_name("python");
  std::vector<DenseTensorView> tables;
  for (size_t t = 0; t < layouts_.size(); ++t) {
    tables.push_back(DenseTensorView{
        layouts_[t].name, tables_.dense_shapes()[t],
        absl::MakeConstSpan(values[t], layouts_[t].num_values)});
  }
  RETURN_IF_ERROR(SaveModel(options_.save_dir,
                            config != nullptr ? *config : named, tables));
  // SYNC: every pserver's rows at the job's last step (the final
  // evaluation waited for it); ASYNC: as they are now.
  RETURN_IF_ERROR(SaveSparseTables(job_client_.get(), job_, sync() ? step_ : 0,
                                   options_.save_dir));
  LOG(INFO) << "model saved to " << options_.save_dir;
  return absl::OkStatus();
}

absl::Status TrainingSession::MarkDone() {
  // A trainer that joined a finished job has no steps to mark.
  if (!started_ || sync() || marked_done_ || joined_finished_job_) {
    return absl::OkStatus();
  }
  marked_done_ = true;
  return params_->MarkDone(step_);
}

void TrainingSession::Leave() {
  if (!started_ || left_) return;
  left_ = true;
  absl::Status left = job_client_->Leave();
  if (!left.ok()) LOG(WARNING) << "leaving the job: " << left;
}

absl::Status TrainingSession::Finish() {
  if (!started_ || finished_) return absl::OkStatus();
  finished_ = true;
  absl::Status s = MarkDone();
  Leave();
  // No heartbeats once left: one would make a pserver restarted meanwhile
  // wait for this trainer again.
  if (heartbeats_ != nullptr) heartbeats_->Stop();
  if (options_.observer != nullptr) options_.observer->Stopped();
  if (s.ok() && options_.wait_for_trainers > absl::ZeroDuration()) {
    s = job_client_->FinishAndWait(options_.num_trainers,
                                   options_.wait_for_trainers,
                                   options_.stop_requested);
    if (s.ok()) {
      LOG(INFO) << "trainer " << options_.trainer_id
                << ": every trainer of the job has finished";
    }
  }
  return s;
}

void TrainingSession::Abandon() {
  if (!started_ || finished_) return;
  finished_ = true;
  Leave();
  if (heartbeats_ != nullptr) heartbeats_->Stop();
  if (options_.observer != nullptr) options_.observer->Stopped();
}

}  // namespace shardps
