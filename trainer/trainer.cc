#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "trainer/data/data_shard.h"
#include "trainer/evaluator.h"
#include "trainer/model/saved_model.h"

namespace shardps {
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

Trainer::Trainer(TrainerOptions options,
                 std::vector<PsClientInterface*> servers)
    : options_(std::move(options)),
      session_(
          std::make_unique<TrainingSession>(options_, std::move(servers))) {}

Trainer::~Trainer() = default;

absl::Status Trainer::Setup() {
  const TrainerOptions& o = options_;
  load_start_ = absl::Now();
  config_ = o.config;
  ASSIGN_OR_RETURN(input_, InputPipeline::Create(&config_, o.trainer_id,
                                                 o.num_trainers, o.batch_size));
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
  return DescribeTables();
}

absl::Status Trainer::DescribeTables() {
  // The model's dense tables, then the sparse one of a sparse input.
  for (ParamTable& t : model_->tables()) {
    RETURN_IF_ERROR(session_
                        ->AddDenseTable(t.name, t.shape,
                                        t.layer->has_optimizer()
                                            ? t.layer->optimizer()
                                            : config_.optimizer())
                        .status());
    values_.push_back(t.value.data());
    grads_.push_back(t.grad.data());
  }
  if (input_->has_sparse_table()) {
    const TableSpec spec = input_->SparseTableSpec();
    ASSIGN_OR_RETURN(
        const int index,
        session_->AddSparseTable(spec.name(), spec.sparse(), spec.optimizer()));
    // The sparse tables follow the dense ones in the job.
    input_->set_sparse_table_id(static_cast<uint32_t>(values_.size() + index));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Start() {
  const TrainerOptions& o = options_;
  // The chief's initial values (the session reads --load_dir's instead).
  if (o.trainer_id == 0 && o.load_dir.empty()) {
    model_->InitializeParameters(o.config.seed() != 0 ? o.config.seed() : 1);
  }
  const std::vector<const float*> init(values_.begin(), values_.end());
  RETURN_IF_ERROR(session_->Start(init, steps_per_pass_));
  const int64_t step = session_->step();
  LOG(INFO) << "trainer " << o.trainer_id << "/" << o.num_trainers << ": "
            << input_->local_records() << " training records, "
            << input_->test_records() << " test records, "
            << model_->num_parameters() << " dense parameters"
            << (input_->has_sparse_table() ? " and a sparse table" : "") << ", "
            << steps_per_pass_ << " steps per pass, " << session_->total_steps()
            << " steps (" << (sync() ? "sync" : "async") << "), started in "
            << absl::FormatDuration(absl::Now() - load_start_)
            << (step > 0 ? absl::StrCat("; at step ", step, " (pass ",
                                        step / steps_per_pass_, ", batch ",
                                        step % steps_per_pass_, ")")
                         : "");
  schedule_ = MakeSchedule();
  return absl::OkStatus();
}

std::unique_ptr<StepSchedule> Trainer::MakeSchedule() {
  StepContext step;
  step.options = &options_;
  step.params = session_->params();
  step.model = model_.get();
  step.input = input_.get();
  step.sharing = session_->sharing();
  step.values = &values_;
  step.grads = &grads_;
  TrainingSession* session = session_.get();
  step.count_pushed = [session](int64_t bytes) { session->CountPushed(bytes); };
  step.cancel_if_fatal = [session](const absl::Status& why) {
    session->CancelIfFatal(why);
  };
  return StepSchedule::Create(std::move(step));
}

absl::Status Trainer::Run() {
  RETURN_IF_ERROR(Setup());
  RETURN_IF_ERROR(Start());
  const absl::Time train_start = absl::Now();
  RETURN_IF_ERROR(session_->joined_finished_job() ? EvaluateFinishedJob()
                                                  : TrainPasses());
  return Finish(train_start);
}

absl::Status Trainer::TrainPasses() {
  const TrainerOptions& o = options_;
  const int64_t total = session_->total_steps();
  int started_pass = -1;
  while (session_->step() < total) {
    if (o.stop_requested != nullptr && o.stop_requested->load()) {
      return Stopped();
    }
    RETURN_IF_ERROR(session_->HeartbeatStatus());
    const int64_t step = session_->step();
    const int pass = static_cast<int>(step / steps_per_pass_);
    if (pass != started_pass) {
      input_->StartPass(pass, o.shuffle, o.shuffle_seed);
      started_pass = pass;
    }
    absl::Status st = Step(pass, step % steps_per_pass_);
    const int64_t done = session_->step();
    if (st.ok() && (done % steps_per_pass_ == 0 || done == total)) {
      const bool last = done == total;
      // Sync: a trainer done with its steps leaves the barrier, so that the
      // others' last steps (with replicas_to_aggregate, their extra ones)
      // do not wait for it.
      if (last && sync()) session_->Leave();
      st = Evaluate(pass, last, done);
    }
    if (sync() && absl::IsAborted(st)) {
      RETURN_IF_ERROR(Recover(st));
      started_pass = -1;
      continue;
    }
    RETURN_IF_ERROR(st);
  }
  return absl::OkStatus();
}

absl::Status Trainer::Stopped() {
  const int64_t step = session_->step();
  LOG(WARNING) << "trainer " << options_.trainer_id
               << " stopped by a signal at step " << step
               << "; leaving the job";
  session_->Leave();
  return absl::CancelledError(
      absl::StrCat("stopped by a signal at step ", step));
}

absl::Status Trainer::EvaluateFinishedJob() {
  LOG(WARNING) << "trainer " << options_.trainer_id
               << ": evaluating the finished job's parameters";
  if (sync()) session_->Leave();  // async: Finish leaves
  // The parameters after the last step (a sync pull waits for that
  // version; the join step may be the one after it).
  const int64_t last = session_->total_steps();
  return Evaluate(static_cast<int>((last - 1) / steps_per_pass_), true, last);
}

absl::Status Trainer::Recover(const absl::Status& why) {
  schedule_->Drain().IgnoreError();
  return session_->Recover(why);
}

absl::Status Trainer::Evaluate(int pass, bool final, int64_t at) {
  // Async: the final evaluation waits until every trainer has finished
  // (and said so once all its pushes were acknowledged), so that all
  // report the accuracy of the final parameters; a trainer that joined a
  // finished job has no steps to mark done, nor others to wait for.
  const bool wait_for_all =
      !sync() && final && !session_->joined_finished_job();
  RETURN_IF_ERROR(schedule_->Drain());
  if (wait_for_all) RETURN_IF_ERROR(session_->MarkDone());
  TransferStats ps;
  RETURN_IF_ERROR(session_->params()->Pull(sync() ? at : 0, at, values_, &ps,
                                           wait_for_all ? at + 1 : 0));
  int64_t pulled = ps.bytes;
  ASSIGN_OR_RETURN(
      const EvalResult e,
      shardps::Evaluate(model_.get(), input_.get(), session_->sparse(),
                        sync() ? at : 0, at, &pulled));
  result_.test_loss = e.loss;
  result_.test_accuracy = e.accuracy;
  result_.test_auc = e.auc;
  session_->Evaluated(
      Evaluation{pass, final, e.loss, e.accuracy, e.auc, e.logloss, pulled});
  return absl::OkStatus();
}

absl::Status Trainer::Finish(absl::Time train_start) {
  RETURN_IF_ERROR(session_->Finish());
  result_.steps = session_->step();
  result_.shared_memory_servers = session_->shared_memory_servers();
  result_.push_bytes = session_->push_bytes();
  result_.pull_bytes = session_->pull_bytes();
  result_.train_seconds = absl::ToDoubleSeconds(absl::Now() - train_start);
  result_.recoveries = session_->recoveries();
  result_.steps_redone = session_->steps_redone();
  const std::vector<const float*> values(values_.begin(), values_.end());
  return session_->Save(values, &model_->config());
}

}  // namespace shardps
