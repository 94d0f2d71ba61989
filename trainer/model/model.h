#ifndef SHARDPS_TRAINER_MODEL_MODEL_H_
#define SHARDPS_TRAINER_MODEL_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/model_config.pb.h"
#include "trainer/model/layers.h"

namespace shardps {

// Loss and accuracy of a batch.
struct BatchStats {
  double loss_sum = 0.0;  // sum over the examples (divide by count for mean)
  int64_t correct = 0;    // examples whose prediction equals the label
  int64_t count = 0;      // examples in the batch
};

// A sequential model built from a ModelConfig: fully connected, convolution,
// pooling, flatten, dropout and elementwise layers, ending in a softmax
// cross-entropy or a logistic loss, computed on a Backend (the CPU by
// default). The parameters live in tables() on the host (the trainer copies
// pulled values in and pushes the gradients out): TrainBatch and Evaluate
// read the values from there at entry (a device backend uploads them), and
// TrainBatch leaves the gradients there when it returns.
// Requires external synchronization: even Evaluate() writes the model's
// activation buffers.
class Model {
 public:
  // What TrainBatch calls for a layer with parameter tables, given their
  // indices in tables(): `before_forward` before the layer reads its
  // values (a trainer waits there for that layer's pull), `after_backward`
  // once their gradients are final in tables() (a trainer pushes them
  // while the layers below still compute). Either may be empty; an error
  // ends TrainBatch with it.
  struct LayerHooks {
    std::function<absl::Status(const std::vector<int>& tables)> before_forward;
    std::function<absl::Status(const std::vector<int>& tables)> after_backward;
  };

  // Validates `config` and builds the layers and parameter tables (values and
  // gradients zero; see InitializeParameters) on `backend` (null: a
  // CpuBackend with one thread). Returns InvalidArgument, naming the layer,
  // for an FC layer with output_dim <= 0, a CONV2D without filters or
  // kernel_size > 0, a pool without pool_size > 0, a negative stride or
  // padding, a window larger than its padded input, a dropout_rate outside
  // [0, 1), an input_shape that does not multiply to input_dim (or, unset,
  // an image layer over an input_dim that is no square), an unknown layer
  // type, a model without FC layer, or a model output width that does not
  // fit the loss (LOGISTIC: 1 and num_classes <= 2; SOFTMAX_CROSS_ENTROPY:
  // num_classes). Errors of the backend (allocation) are returned as they
  // are. Unnamed layers are named after their type and position: "fc0",
  // "relu1", "sigmoid2", "tanh3", "conv4", "maxpool5", "avgpool6",
  // "flatten7", "dropout8".
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelConfig& config, int input_dim, int num_classes,
      std::unique_ptr<Backend> backend = nullptr);

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The parameter tables in a fixed order: for each FULLY_CONNECTED layer,
  // "<name>.weight" {in, out} then "<name>.bias" {out}; for each CONV2D,
  // "<name>.weight" {filters, in_channels, k, k} then "<name>.bias"
  // {filters}; for each BIAS layer "<name>.bias". Callers may write
  // value (and read grad), but must not resize the vector or the tables.
  std::vector<ParamTable>& tables() { return tables_; }
  const std::vector<ParamTable>& tables() const { return tables_; }

  // Fills every table's value from its initializer (weights: weight_init,
  // default XAVIER_UNIFORM; biases: bias_init, default CONSTANT 0). The same
  // seed gives bit-identical values on any machine. A CONV2D weight's fan-in
  // is in_channels * k * k and its fan-out filters * k * k.
  void InitializeParameters(uint64_t seed);

  // Runs forward and backward on `batch` examples: x is (batch x input_dim)
  // row-major, labels in [0, num_classes) (0 or 1 for LOGISTIC). Overwrites
  // every table's grad with the gradient of the MEAN loss over the batch.
  // Returns InvalidArgument for batch <= 0 or a label out of range, in which
  // case the gradients are unspecified, and the backend's errors.
  // If `input_grad` is not null it receives the gradient of the mean loss
  // with respect to x (batch x input_dim), for a sparse input below.
  // `hooks` (may be null) are called around each layer that has tables.
  absl::StatusOr<BatchStats> TrainBatch(const float* x, const int32_t* labels,
                                        int batch, float* input_grad = nullptr,
                                        const LayerHooks* hooks = nullptr);

  // Forward only. For LOGISTIC, an example is correct when (p >= 0.5) equals
  // its label. If `probabilities` is not null it receives batch * output_dim()
  // floats: P(label = 1) per example for LOGISTIC, the softmax row per example
  // for SOFTMAX_CROSS_ENTROPY.
  // Dropout layers are the identity. Returns the backend's errors.
  // REQUIRES: labels in range (an out-of-range label is counted in `count`,
  // never as correct, and adds no loss; a warning is logged).
  absl::StatusOr<BatchStats> Evaluate(const float* x, const int32_t* labels,
                                      int batch,
                                      float* probabilities = nullptr);

  // Dropout masks: the next TrainBatch draws those of `stream` (the
  // trainer id) at position `step`, so that trainers draw different masks
  // and a restarted or rolled-back trainer draws the same ones again. See
  // DropoutLayer::SetStream.
  void SetDropoutStream(uint64_t stream, int64_t step);

  int input_dim() const { return input_dim_; }
  int num_classes() const { return num_classes_; }
  // Width of the model output: 1 for LOGISTIC, num_classes otherwise.
  int output_dim() const { return layers_.back()->output_dim(); }
  // Total number of parameters over all tables.
  int64_t num_parameters() const;
  // The tables of each layer, by index in tables(), in layer order (empty
  // for a layer without parameters).
  const std::vector<std::vector<int>>& layer_tables() const {
    return layer_tables_;
  }
  // The config, with every layer named.
  const ModelConfig& config() const { return config_; }
  // Where the layers compute.
  Backend* backend() const { return backend_.get(); }

 private:
  Model(const ModelConfig& config, int input_dim, int num_classes);

  // Sizes params_ and, on a device backend, allocates the device copies of
  // the tables that params_ then points at.
  absl::Status BindBuffers();
  // Makes room for `batch` examples in the activation buffers (grows only).
  absl::Status Reserve(int batch);
  // Points params_ at `tables`' values (a device backend uploads them).
  absl::Status BindParameters(const std::vector<int>& tables);
  // Runs the layers on x (host memory); the output is acts_.back().
  absl::Status Forward(const float* x, int batch, bool training,
                       const LayerHooks* hooks = nullptr);
  // Loss and accuracy of the output in acts_.back(); if `dlogits` is not null
  // writes the gradient of the mean loss there. Skips invalid labels.
  absl::StatusOr<BatchStats> Loss(const int32_t* labels, int batch,
                                  float* dlogits, float* probabilities);
  absl::Status CheckLabels(const int32_t* labels, int batch) const;

  ModelConfig config_;  // owns the LayerConfigs that tables_ point to
  const int input_dim_;
  const int num_classes_;
  std::unique_ptr<Backend> backend_;
  std::vector<ParamTable> tables_;
  std::vector<std::vector<int>> layer_tables_;
  // params_[t]: where tables_[t] lives on the backend (stable addresses:
  // the layers point at them). A device backend keeps its copies in
  // device_values_ and device_grads_.
  std::vector<ParamBuffers> params_;
  std::vector<BackendBuffer> device_values_;
  std::vector<BackendBuffer> device_grads_;
  std::vector<std::unique_ptr<Layer>> layers_;
  int batch_capacity_ = 0;
  // acts_[i]: output of layers_[i]; grads_[i]: d loss / d acts_[i].
  std::vector<BackendBuffer> acts_;
  std::vector<BackendBuffer> grads_;
  // A device backend's copies of the input and of its gradient.
  BackendBuffer input_;
  BackendBuffer input_grad_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_MODEL_H_
