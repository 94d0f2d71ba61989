#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "common/transport/wire_limits.h"
#include "glog/logging.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "trainer/client/sparse_export.h"
#include "trainer/data/data_shard.h"
#include "trainer/evaluator.h"
#include "trainer/model/saved_model.h"
#include "trainer/recovery_planner.h"

namespace shardps {
namespace {

constexpr int64_t kDefaultBlockSize = 65536;

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

JobSpec MakeJobSpec(const TrainerOptions& o,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<int64_t>>& shapes,
                    const std::vector<OptimizerConfig>& optimizers) {
  JobSpec job;
  job.set_mode(o.mode);
  job.set_num_trainers(o.num_trainers);
  job.set_max_staleness(o.mode == ASYNC ? o.max_staleness : -1);
  job.set_global_batch_size(int64_t{o.batch_size} * o.num_trainers);
  job.set_replicas_to_aggregate(o.replicas_to_aggregate);
  if (o.replication > 1) {
    job.set_replication(o.replication);
    // Set only when not the default (0 is read as it), so that a job
    // checkpointed before these fields existed is the same job.
    const TrainerOptions defaults;
    if (o.pserver_lease != defaults.pserver_lease) {
      job.set_pserver_lease_ms(
          static_cast<int32_t>(absl::ToInt64Milliseconds(o.pserver_lease)));
    }
    if (o.failover_after != defaults.failover_after) {
      job.set_failover_after_ms(
          static_cast<int32_t>(absl::ToInt64Milliseconds(o.failover_after)));
    }
  }
  const int64_t block_size =
      o.config.block_size() > 0 ? o.config.block_size() : kDefaultBlockSize;
  for (size_t i = 0; i < names.size(); ++i) {
    TableSpec* t = job.add_tables();
    t->set_name(names[i]);
    for (int64_t d : shapes[i]) t->add_shape(d);
    t->set_block_size(block_size);
    *t->mutable_optimizer() = optimizers[i];
  }
  return job;
}

absl::StatusOr<JobClients> MakeJobClients(
    const TrainerOptions& o, const std::vector<PsClientInterface*>& servers,
    RequestStamp* stamp, const std::vector<DenseTableLayout>& layouts,
    const ThresholdPushEncoder::Options& threshold) {
  JobClients c;
  c.job = std::make_unique<JobClient>(servers, stamp);
  std::vector<PsClientInterface*> data = servers;
  if (o.replication > 1) {
    if (o.replication > static_cast<int>(servers.size()) ||
        o.failover_servers.size() != servers.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--replication=", o.replication, " needs at least as many pservers (",
          servers.size(), " in --pservers)"));
    }
    ReplicaRouter::Options ro;
    ro.replication = o.replication;
    ro.sync = o.mode == SYNC;
    ro.trainer_id = o.trainer_id;
    ro.lease = o.pserver_lease;
    ro.give_up_after = std::max(absl::Seconds(60), 15 * o.pserver_lease);
    c.router = std::make_unique<ReplicaRouter>(o.failover_servers, ro);
    data = c.router->shard_clients();
    ReplicaRouter* r = c.router.get();
    c.job->set_replication(o.replication, [r](int s) { return r->Live(s); });
  }
  c.params = std::make_unique<ParamClient>(data, stamp, layouts);
  c.sparse = std::make_unique<SparseClient>(data, stamp);
  switch (o.compression) {
    case Compression::kNone:
      break;
    case Compression::kFp16:
      c.params->set_encodings(FLOAT16, FLOAT16);
      break;
    case Compression::kBf16:
      c.params->set_encodings(BFLOAT16, BFLOAT16);
      break;
    case Compression::kThreshold:
      c.params->set_threshold_compression(threshold);
      if (o.compressed_pulls) c.params->set_encodings(FLOAT32, THRESHOLD);
      break;
  }
  return c;
}

void OpenValueLanes(const TrainerOptions& o, ParamClient* params,
                    size_t servers) {
  // Replicated shards move between pservers; their values go over gRPC.
  if (o.replication > 1) return;
  const int n = o.shared_memory ? params->UseSharedMemory() : 0;
  int lanes = 0;
  if (o.tcp_lane) {
    TcpLanePsClient::Options lane;
    lane.connections = o.tcp_lane_connections;
    lane.spin = o.tcp_lane_spin;
    lanes = params->UseTcpLane(lane);
  }
  const int grpc = static_cast<int>(servers) - n - lanes;
  LOG(INFO) << "trainer " << o.trainer_id << ": dense values through "
            << "shared memory with " << n << " of " << servers << " pservers"
            << (lanes > 0 ? absl::StrCat(", over the TCP lane with ", lanes)
                          : "")
            << (grpc > 0 ? absl::StrCat(", over gRPC with ", grpc,
                                        " (the log above says why)")
                         : "");
}

Trainer::Trainer(TrainerOptions options,
                 std::vector<PsClientInterface*> servers)
    : options_(std::move(options)),
      servers_(std::move(servers)),
      stamp_(options_.trainer_id, options_.incarnation) {}

Trainer::~Trainer() {
  // The router's thread calls the chief's rejoin, which reads params_ and
  // job_client_: stopped before they go (a trainer aborted at exit with
  // bad_alloc when a probe ran after params_ was destroyed).
  if (router_ != nullptr) router_->Stop();
}

namespace {

// The backend the layers run on: the CUDA device of --gpu_id with
// --use_gpu, the CPU with --num_threads otherwise (logged either way).
absl::StatusOr<std::unique_ptr<Backend>> BackendFor(const TrainerOptions& o) {
  std::unique_ptr<Backend> backend;
  if (o.use_gpu) {
    ASSIGN_OR_RETURN(backend, CreateCudaBackend(o.gpu_id));
    absl::StatusOr<std::string> gpu = DescribeCudaDevice(o.gpu_id);
    LOG(INFO) << "trainer " << o.trainer_id << ": "
              << (gpu.ok() ? *gpu : gpu.status().ToString());
  } else {
    backend = std::make_unique<CpuBackend>(o.cpu_threads);
  }
  LOG(INFO) << "trainer " << o.trainer_id << ": layers on " << backend->name();
  return backend;
}

}  // namespace

absl::Status Trainer::Setup() {
  const TrainerOptions& o = options_;
  const int k = o.trainer_id;
  if (o.config.block_size() < 0 || o.config.block_size() > kMaxBlockSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: block_size must be in [1, ", kMaxBlockSize,
                     "], got ", o.config.block_size()));
  }
  const absl::Time load_start = absl::Now();
  config_ = o.config;
  ASSIGN_OR_RETURN(
      input_, InputPipeline::Create(&config_, k, o.num_trainers, o.batch_size));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, BackendFor(o));
  ASSIGN_OR_RETURN(model_,
                   Model::Create(config_, input_->model_input_dim(),
                                 input_->num_classes(), std::move(backend)));
  const std::vector<int64_t>& records = input_->records_per_trainer();
  steps_per_pass_ = ShardedDataset::StepsPerPass(records, o.batch_size);
  if (steps_per_pass_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch size ", o.batch_size, " exceeds the records of some trainer (",
        *std::min_element(records.begin(), records.end()),
        "): no step would run"));
  }
  total_steps_ = steps_per_pass_ * o.num_passes;
  if (o.max_steps > 0) total_steps_ = std::min(total_steps_, o.max_steps);
  LOG(INFO) << "trainer " << k << "/" << o.num_trainers << ": "
            << input_->local_records() << " training records, "
            << input_->test_records() << " test records, "
            << model_->num_parameters() << " dense parameters"
            << (input_->has_sparse_table() ? " and a sparse table" : "") << ", "
            << steps_per_pass_ << " steps per pass, " << total_steps_
            << " steps (" << (sync() ? "sync" : "async") << "), loaded in "
            << absl::FormatDuration(absl::Now() - load_start);
  RETURN_IF_ERROR(DescribeJob());
  ASSIGN_OR_RETURN(JobClients clients,
                   MakeJobClients(o, servers_, &stamp_, layouts_, threshold_));
  job_client_ = std::move(clients.job);
  router_ = std::move(clients.router);
  params_ = std::move(clients.params);
  sparse_ = std::move(clients.sparse);
  schedule_ = MakeSchedule();
  return absl::OkStatus();
}

absl::Status Trainer::CheckLars(
    const std::vector<std::string>& names,
    const std::vector<OptimizerConfig>& optimizers) {
  const TrainerOptions& o = options_;
  for (size_t t = 0; t < optimizers.size(); ++t) {
    if (optimizers[t].type() != OptimizerConfig::LARS) continue;
    const char* why = !sync()                       ? "--mode=async"
                      : o.replicas_to_aggregate > 0 ? "--replicas_to_aggregate"
                      : o.compression == Compression::kThreshold
                          ? "--compression=threshold"
                          : nullptr;
    if (why != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", names[t], " has LARS, which does not work with ", why,
          ": its trust ratio needs the whole table's norms at each sync "
          "step (docs/tuning.md, \"LARS\")"));
    }
    lars_tables_.resize(optimizers.size());
    lars_tables_[t] = true;
  }
  return absl::OkStatus();
}

std::unique_ptr<StepSchedule> Trainer::MakeSchedule() {
  StepContext step;
  step.options = &options_;
  step.params = params_.get();
  step.model = model_.get();
  step.input = input_.get();
  step.sharing = sharing_.get();
  step.values = &values_;
  step.grads = &grads_;
  step.push_bytes = &push_bytes_;
  step.cancel_if_fatal = [this](const absl::Status& why) {
    CancelIfFatal(why);
  };
  return StepSchedule::Create(std::move(step));
}

absl::Status Trainer::DescribeJob() {
  // The model's dense tables, then the sparse one of a sparse input.
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<OptimizerConfig> optimizers;
  std::vector<size_t> sizes;
  for (ParamTable& t : model_->tables()) {
    names.push_back(t.name);
    shapes.push_back(t.shape);
    optimizers.push_back(t.layer->has_optimizer() ? t.layer->optimizer()
                                                  : config_.optimizer());
    values_.push_back(t.value.data());
    grads_.push_back(t.grad.data());
    sizes.push_back(t.value.size());
  }
  RETURN_IF_ERROR(CheckLars(names, optimizers));
  if (options_.compression == Compression::kThreshold) {
    threshold_ = options_.threshold;
    if (threshold_.threshold == 0) {
      for (const OptimizerConfig& oc : optimizers) {
        threshold_.table_thresholds.push_back(
            UpdateSharing::DefaultThreshold(oc));
      }
    }
    ASSIGN_OR_RETURN(sharing_,
                     UpdateSharing::Create(
                         names, &optimizers, sizes, options_.momentum_masking,
                         int64_t{options_.batch_size} * options_.num_trainers));
  }
  job_ = MakeJobSpec(options_, names, shapes, optimizers);
  for (size_t t = 0; t < names.size(); ++t) {
    layouts_.push_back(DenseTableLayout{
        names[t], static_cast<int64_t>(sizes[t]), job_.tables(t).block_size()});
  }
  if (input_->has_sparse_table()) {
    input_->set_sparse_table_id(static_cast<uint32_t>(job_.tables_size()));
    *job_.add_tables() = input_->SparseTableSpec();
    if (job_.tables(job_.tables_size() - 1).optimizer().type() ==
        OptimizerConfig::LARS) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the sparse table ", job_.tables(job_.tables_size() - 1).name(),
          " has LARS, which is for dense tables (give the sparse input an "
          "optimizer of its own)"));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::Connect() {
  const TrainerOptions& o = options_;
  const int k = o.trainer_id;
  RETURN_IF_ERROR(job_client_->Register());
  if (k == 0) {
    if (!o.load_dir.empty()) {
      RETURN_IF_ERROR(LoadModelParams(o.load_dir, &model_->tables()));
      LOG(INFO) << "initial parameters from " << o.load_dir;
    } else {
      model_->InitializeParameters(o.config.seed() != 0 ? o.config.seed() : 1);
    }
    const std::vector<const float*> init(values_.begin(), values_.end());
    RETURN_IF_ERROR(job_client_->InitJob(job_, params_->chunks(), init));
  }
  RETURN_IF_ERROR(job_client_->WaitUntilReady(job_, o.ready_timeout));
  ASSIGN_OR_RETURN(step_, SyncWithPservers());
  OpenValueLanes();
  if (step_ > 0) {
    LOG(INFO) << "trainer " << k << " joins the job at step " << step_
              << " (pass " << step_ / steps_per_pass_ << ", batch "
              << step_ % steps_per_pass_ << ")";
  }
  checkpoints_ = std::make_unique<CheckpointRequester>(
      job_client_.get(), o.checkpoint_every_steps, k == 0, o.observer,
      /*k_of_n=*/o.replicas_to_aggregate > 0);
  RETURN_IF_ERROR(checkpoints_->CheckPservers());
  checkpoints_->ResumedAt(step_);
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

absl::StatusOr<int64_t> Trainer::SyncWithPservers() {
  return JoinAgreedTimeline(job_client_.get(), &stamp_, options_.trainer_id,
                            sync(), options_.ready_timeout);
}

void Trainer::OpenValueLanes() {
  shardps::OpenValueLanes(options_, params_.get(), servers_.size());
}

void Trainer::CancelIfFatal(const absl::Status& why) {
  if (sync() && absl::IsAborted(why)) return;  // Run recovers from it
  LOG(WARNING) << "trainer " << options_.trainer_id << ": step " << step_
               << " failed, stopping: " << why
               << "; cancelling the calls still in flight";
  for (PsClientInterface* s : servers_) s->CancelCalls();
  for (PsClientInterface* s : options_.failover_servers) s->CancelCalls();
  if (params_ != nullptr) params_->CancelSharedCalls();
}

absl::Status Trainer::Evaluate(int pass, bool final) {
  const TrainerOptions& o = options_;
  // Async: the final evaluation waits until every trainer has finished
  // (and said so once all its pushes were acknowledged), so that all
  // report the accuracy of the final parameters.
  // Async: a trainer that joined a finished job has no steps to mark done,
  // nor others to wait for.
  const bool wait_for_all = !sync() && final && !joined_finished_job_;
  RETURN_IF_ERROR(schedule_->Drain());
  if (wait_for_all) RETURN_IF_ERROR(params_->MarkDone(total_steps_));
  TransferStats ps;
  RETURN_IF_ERROR(params_->Pull(sync() ? step_ : 0, step_, values_, &ps,
                                wait_for_all ? total_steps_ + 1 : 0));
  const int64_t pulled_before = pull_bytes_;
  pull_bytes_ += ps.bytes;
  ASSIGN_OR_RETURN(const EvalResult e,
                   shardps::Evaluate(model_.get(), input_.get(), sparse_.get(),
                                     sync() ? step_ : 0, step_, &pull_bytes_));
  if (o.observer != nullptr) {
    o.observer->Evaluated(EvalReport{pass, step_, final, e.loss, e.accuracy,
                                     e.auc, pull_bytes_ - pulled_before});
  }
  result_.test_loss = e.loss;
  result_.test_accuracy = e.accuracy;
  result_.test_auc = e.auc;
  const double secs = Seconds(train_time_);
  JsonLine line("eval");
  line.Add("trainer_id", o.trainer_id)
      .Add("pass", pass)
      .Add("step", step_)
      .Add("final", final ? 1 : 0)
      .Add("test_loss", e.loss)
      .Add("test_accuracy", e.accuracy);
  if (!std::isnan(e.auc)) {
    line.Add("test_auc", e.auc).Add("test_logloss", e.logloss);
  }
  line.Add("push_bytes", push_bytes_)
      .Add("pull_bytes", pull_bytes_)
      .Add("train_seconds", secs)
      .Add("samples_per_s", secs > 0 ? step_ * o.batch_size / secs : 0.0);
  metrics_->Write(line);
  progress_->EndLine();
  LOG(INFO) << absl::StrFormat(
      "trainer %d pass %d step %d: test loss %.4f, test accuracy %.4f%s, "
      "pushed %.1f MB, pulled %.1f MB",
      o.trainer_id, pass, step_, e.loss, e.accuracy,
      std::isnan(e.auc) ? "" : absl::StrFormat(", test AUC %.4f", e.auc),
      push_bytes_ / 1e6, pull_bytes_ / 1e6);
  return absl::OkStatus();
}

absl::Status Trainer::Recover(const absl::Status& why) {
  const int k = options_.trainer_id;
  const absl::Time t0 = absl::Now();
  const int64_t from = step_;
  LOG(WARNING) << "trainer " << k << " at step " << step_ << ": "
               << why.message() << "; recovering";
  schedule_->Drain().IgnoreError();
  ASSIGN_OR_RETURN(step_, SyncWithPservers());
  OpenValueLanes();  // a restarted pserver holds none of the regions or lanes
  if (sharing_ != nullptr) {
    params_->threshold_encoder()->Reset();
    sharing_->Reset();
  }
  checkpoints_->ResumedAt(step_);
  ++result_.recoveries;
  if (options_.observer != nullptr) options_.observer->Recovered(from, step_);
  const int64_t lost = std::max<int64_t>(0, from - step_);
  result_.steps_redone += lost;
  const double secs = Seconds(absl::Now() - t0);
  const double stalled = Seconds(absl::Now() - last_ok_);
  metrics_->Write(
      JsonLine("recovery")
          .Add("trainer_id", k)
          .Add("from_step", from)
          .Add("to_step", step_)
          .Add("steps_lost", lost)
          .Add("seconds", secs)
          .Add("stalled_seconds", stalled)
          .Add("generation", static_cast<int64_t>(stamp_.generation())));
  LOG(WARNING) << absl::StrFormat(
      "trainer %d recovered in %.2f s (%.1f s since its last step): "
      "generation %d, back to step %d from step %d",
      k, secs, stalled, stamp_.generation(), step_, from);
  return absl::OkStatus();
}

void Trainer::LeaveQuietly() {
  absl::Status left = job_client_->Leave();
  if (!left.ok()) LOG(WARNING) << "leaving the job: " << left;
}

absl::Status Trainer::Run() {
  const TrainerOptions& o = options_;
  RETURN_IF_ERROR(Setup());
  RETURN_IF_ERROR(Connect());
  ASSIGN_OR_RETURN(metrics_, MetricsWriter::Open(o.metrics_file));
  ProgressReporter::Options p;
  p.trainer_id = o.trainer_id;
  p.num_passes = o.num_passes;
  p.log_every_steps = o.log_every_steps;
  p.progress_bar = o.progress_bar;
  p.network = [this] {
    NetworkPicture n;
    n.servers = static_cast<int>(servers_.size());
    n.shared_servers = params_->shared_servers();
    n.lane_servers = params_->tcp_lane_servers();
    n.compression = options_.compression;
    n.compressed_pulls = options_.compressed_pulls;
    return n;
  };
  progress_ = std::make_unique<ProgressReporter>(p, steps_per_pass_,
                                                 total_steps_, metrics_.get());
  const absl::Time train_start = absl::Now();
  last_ok_ = train_start;
  if (o.observer != nullptr) o.observer->Ready(step_);
  if (step_ >= total_steps_) {
    // The pservers hold a run that has finished (the same --job_id and
    // checkpoints as a finished one): report its parameters, train nothing.
    joined_finished_job_ = true;
    LOG(WARNING) << "trainer " << o.trainer_id << ": the job has run all its "
                 << total_steps_ << " steps already (the pservers hold step "
                 << step_ << "): evaluating its parameters, training nothing "
                 << "(another --job_id, or empty --checkpoint_dir folders, "
                 << "starts a new run)";
    if (sync()) LeaveQuietly();  // async: Finish leaves
    // The parameters after the last step (a sync pull waits for that
    // version; the join step may be the one after it).
    step_ = total_steps_;
    RETURN_IF_ERROR(
        Evaluate(static_cast<int>((total_steps_ - 1) / steps_per_pass_), true));
    return Finish(train_start);
  }
  int started_pass = -1;
  while (step_ < total_steps_) {
    if (o.stop_requested != nullptr && o.stop_requested->load()) {
      absl::Status left = job_client_->Leave();
      LOG(WARNING) << "trainer " << o.trainer_id
                   << " stopped by a signal at step " << step_
                   << (left.ok() ? "; left the job" : "");
      return absl::CancelledError(
          absl::StrCat("stopped by a signal at step ", step_));
    }
    if (heartbeats_ != nullptr) RETURN_IF_ERROR(heartbeats_->status());
    const int pass = static_cast<int>(step_ / steps_per_pass_);
    if (pass != started_pass) {
      input_->StartPass(pass, o.shuffle, o.shuffle_seed);
      started_pass = pass;
    }
    absl::Status st = Step(pass, step_ % steps_per_pass_);
    if (st.ok() && (step_ % steps_per_pass_ == 0 || step_ == total_steps_)) {
      const bool last = step_ == total_steps_;
      // Sync: a trainer done with its steps leaves the barrier, so that the
      // others' last steps (with replicas_to_aggregate, their extra ones)
      // do not wait for it.
      if (last && sync()) LeaveQuietly();
      st = Evaluate(pass, last);
    }
    if (st.ok()) last_ok_ = absl::Now();
    if (sync() && absl::IsAborted(st)) {
      RETURN_IF_ERROR(Recover(st));
      started_pass = -1;
      continue;
    }
    RETURN_IF_ERROR(st);
  }
  return Finish(train_start);
}

absl::Status Trainer::Finish(absl::Time train_start) {
  if (!sync()) LeaveQuietly();
  // No heartbeats once left: one would make a pserver restarted meanwhile
  // wait for this trainer again.
  if (heartbeats_ != nullptr) heartbeats_->Stop();
  if (options_.wait_for_trainers > absl::ZeroDuration()) {
    RETURN_IF_ERROR(job_client_->FinishAndWait(options_.num_trainers,
                                               options_.wait_for_trainers,
                                               options_.stop_requested));
    LOG(INFO) << "trainer " << options_.trainer_id
              << ": every trainer of the job has finished";
  }
  result_.steps = step_;
  result_.shared_memory_servers = params_->shared_servers();
  result_.push_bytes = push_bytes_;
  result_.pull_bytes = pull_bytes_;
  result_.train_seconds = Seconds(absl::Now() - train_start);
  if (options_.trainer_id == 0 && !options_.save_dir.empty()) {
    RETURN_IF_ERROR(
        SaveModel(options_.save_dir, model_->config(), model_->tables()));
    // Sync: every pserver's rows at the job's last step (the final
    // evaluation waited for it); async: as they are now.
    RETURN_IF_ERROR(SaveSparseTables(job_client_.get(), job_,
                                     sync() ? step_ : 0, options_.save_dir));
    LOG(INFO) << "model saved to " << options_.save_dir;
  }
  return absl::OkStatus();
}

}  // namespace shardps
