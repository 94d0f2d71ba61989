#include "trainer/input_pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "trainer/data/dataset_loader.h"
#include "trainer/model/sparse_input.h"
#include "trainer/optimizer_adaptation.h"

namespace shardps {
namespace {

// IDX images: the records are the model's input.
class DenseInput final : public InputPipeline {
 public:
  DenseInput(TrainData train, IdxData test, int batch_size)
      : train_(std::move(train)),
        test_(std::move(test)),
        x_(static_cast<size_t>(std::max(batch_size, 1)) * train_.shard->dim()),
        labels_(std::max(batch_size, 1)) {}

  int model_input_dim() const override { return train_.shard->dim(); }
  int num_classes() const override {
    return std::max(train_.shard->num_classes(), test_.num_classes);
  }
  int64_t local_records() const override {
    return train_.shard->num_local_records();
  }
  int64_t test_records() const override { return test_.num_records; }
  const std::vector<int64_t>& records_per_trainer() const override {
    return train_.records_per_trainer;
  }
  void StartPass(int pass, bool shuffle, uint64_t seed) override {
    train_.shard->StartPass(pass, shuffle, seed);
  }
  void LoadTrainBatch(int64_t index, int batch_size) override {
    train_.shard->GetBatch(index, batch_size, x_.data(), labels_.data());
    x_ptr_ = x_.data();
    labels_ptr_ = labels_.data();
  }
  void LoadTestBatch(int64_t first, int n) override {
    x_ptr_ = test_.features.data() + first * test_.dim;
    labels_ptr_ = test_.labels.data() + first;
  }
  const float* x() override { return x_ptr_; }
  const int32_t* labels() const override { return labels_ptr_; }

 private:
  TrainData train_;
  IdxData test_;
  std::vector<float> x_;
  std::vector<int32_t> labels_;
  const float* x_ptr_ = nullptr;
  const int32_t* labels_ptr_ = nullptr;
};

// LIBSVM records: sum-pooled rows of a sparse table are the model's input.
class SparseInputPipeline final : public InputPipeline {
 public:
  SparseInputPipeline(const ModelConfig& config, SparseTrainData train,
                      std::unique_ptr<SparseDataset> test)
      : config_(config),
        train_(std::move(train)),
        test_(std::move(test)),
        input_(config.sparse_input().dim(), config.sparse_input().num_fields(),
               config.sparse_input().field_shift()) {}

  int model_input_dim() const override { return input_.width(); }
  int num_classes() const override { return 2; }
  int64_t local_records() const override { return train_.shard->num_records(); }
  int64_t test_records() const override { return test_->num_records(); }
  const std::vector<int64_t>& records_per_trainer() const override {
    return train_.records_per_trainer;
  }
  bool has_sparse_table() const override { return true; }
  TableSpec SparseTableSpec() const override {
    const SparseInputConfig& c = config_.sparse_input();
    TableSpec t;
    t.set_name(c.table().empty() ? "sparse_input" : c.table());
    t.set_kind(TableSpec::SPARSE);
    t.mutable_sparse()->set_dim(c.dim());
    *t.mutable_sparse()->mutable_init() = c.init();
    t.mutable_sparse()->set_admit_after(c.admit_after());
    t.mutable_sparse()->set_evict_after_steps(c.evict_after_steps());
    if (c.has_eviction())
      *t.mutable_sparse()->mutable_eviction() = c.eviction();
    if (c.has_disk()) *t.mutable_sparse()->mutable_disk() = c.disk();
    t.mutable_sparse()->set_admission_max_keys(c.admission_max_keys());
    t.mutable_sparse()->set_storage_type(c.storage_type());
    t.mutable_sparse()->set_gradient_mean(c.gradient_mean());
    *t.mutable_optimizer() =
        c.has_optimizer() ? c.optimizer() : config_.optimizer();
    return t;
  }
  void StartPass(int pass, bool shuffle, uint64_t seed) override {
    train_.shard->StartPass(pass, shuffle, seed);
  }
  void LoadTrainBatch(int64_t index, int batch_size) override {
    Load(*train_.shard, index * batch_size, batch_size);
  }
  void LoadTestBatch(int64_t first, int n) override { Load(*test_, first, n); }
  absl::Status PullRows(SparseClient* client, int64_t min_version, int64_t step,
                        TransferStats* stats) override {
    std::vector<SparseTransfer> t = {{sparse_table_id_, input_.dim(),
                                      input_.keys(), input_.rows().data(),
                                      nullptr}};
    RETURN_IF_ERROR(client->Pull(min_version, step, t, stats));
    input_.Forward(h_.data());
    return absl::OkStatus();
  }
  const float* x() override { return h_.data(); }
  const int32_t* labels() const override { return labels_.data(); }
  float* input_grad() override { return dh_.data(); }
  absl::Status PushRows(SparseClient* client, int64_t step, bool sync,
                        TransferStats* stats) override {
    input_.Backward(dh_.data());
    std::vector<SparseTransfer> t = {{sparse_table_id_, input_.dim(),
                                      input_.keys(), nullptr,
                                      input_.grads().data()}};
    return client->Push(step, sync, t, stats);
  }

 private:
  void Load(const SparseDataset& data, int64_t first, int n) {
    labels_.resize(n);
    data.GetRange(first, n, &batch_, labels_.data());
    input_.SetBatch(&batch_);
    h_.assign(static_cast<size_t>(n) * input_.width(), 0.0f);
    dh_.assign(h_.size(), 0.0f);
  }

  const ModelConfig config_;
  SparseTrainData train_;
  std::unique_ptr<SparseDataset> test_;
  SparseInput input_;
  SparseBatch batch_;
  std::vector<int32_t> labels_;
  std::vector<float> h_, dh_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<InputPipeline>> InputPipeline::Create(
    ModelConfig* config_io, int trainer_id, int num_trainers, int batch_size) {
  const ModelConfig& config = *config_io;
  const DataConfig& data = config.data();
  if (data.format() == DataConfig::LIBSVM) {
    const SparseInputConfig& si = config.sparse_input();
    if (si.dim() <= 0) {
      return absl::InvalidArgumentError(
          "config: LIBSVM data needs a sparse_input with dim > 0");
    }
    if (si.num_fields() < 0 || si.field_shift() < 0 || si.field_shift() > 63) {
      return absl::InvalidArgumentError(
          "config: sparse_input needs num_fields >= 0 and field_shift in "
          "[0, 63]");
    }
    ASSIGN_OR_RETURN(SparseTrainData train,
                     LoadSparseTrainData(data, trainer_id, num_trainers));
    if (si.adapt_optimizer_to_data()) {
      ASSIGN_OR_RETURN(DataStatistics stats, StatisticsOf(train.summary));
      ASSIGN_OR_RETURN(std::string line,
                       AdaptOptimizersToData(stats, config_io));
      LOG(INFO) << "trainer " << trainer_id << ": " << line;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<SparseDataset> test,
                     LoadSparseTestData(data));
    return std::unique_ptr<InputPipeline>(
        new SparseInputPipeline(config, std::move(train), std::move(test)));
  }
  if (config.sparse_input().dim() > 0 ||
      config.sparse_input().adapt_optimizer_to_data()) {
    return absl::InvalidArgumentError(
        "config: sparse_input needs LIBSVM data (data { format: LIBSVM })");
  }
  ASSIGN_OR_RETURN(TrainData train,
                   LoadTrainData(data, trainer_id, num_trainers));
  ASSIGN_OR_RETURN(IdxData test, LoadTestData(data));
  if (test.num_records > 0 && test.dim != train.shard->dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("test records have ", test.dim, " values, training ",
                     "records ", train.shard->dim()));
  }
  return std::unique_ptr<InputPipeline>(
      new DenseInput(std::move(train), std::move(test), batch_size));
}

}  // namespace shardps
