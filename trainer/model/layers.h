#ifndef SHARDPS_TRAINER_MODEL_LAYERS_H_
#define SHARDPS_TRAINER_MODEL_LAYERS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "proto/model_config.pb.h"

namespace shardps {

// One trainable parameter table of a model: its values (pulled from the
// pservers) and the gradient of the last batch (pushed to them).
struct ParamTable {
  std::string name;  // "<layer>.weight" or "<layer>.bias"
  // {in, out} for FC weights, {filters, in_channels, k, k} for CONV2D
  // weights, {out} for biases.
  std::vector<int64_t> shape;
  const LayerConfig* layer;  // owned by the Model; never null
  std::vector<float> value;  // row-major, product(shape) floats
  std::vector<float> grad;   // same size as value
};

// Where a table's value and gradient live on the model's backend: the
// table's own vectors on a host-memory backend, device buffers otherwise.
// The Model sets them before every forward pass.
struct ParamBuffers {
  float* value = nullptr;
  float* grad = nullptr;
};

// Shape of one example's activation: (channels, height, width), NCHW; a
// vector of d values is (d, 1, 1).
struct TensorShape {
  int channels = 0;
  int height = 1;
  int width = 1;
  int size() const { return channels * height * width; }
};

// A layer of a sequential model, computing a batch at a time on its
// backend's buffers: (batch x dim) row-major, images NCHW. Requires external
// synchronization.
class Layer {
 public:
  // `backend` must outlive the layer.
  Layer(std::string name, TensorShape input, TensorShape output,
        Backend* backend)
      : name_(std::move(name)),
        input_(input),
        output_(output),
        backend_(backend) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  int input_dim() const { return input_.size(); }
  int output_dim() const { return output_.size(); }
  const TensorShape& input_shape() const { return input_; }
  const TensorShape& output_shape() const { return output_; }

  // Makes room for batches of up to `batch` examples in the layer's own
  // buffers (dropout's mask).
  virtual absl::Status Reserve(int batch) { return absl::OkStatus(); }

  // out (batch x output_dim) = f(in (batch x input_dim)). `training` is
  // false at evaluation (dropout is then the identity).
  virtual absl::Status Forward(const float* in, int batch, bool training,
                               float* out) = 0;

  // Given the forward input `in`, output `out` and the gradient `dout` of the
  // loss with respect to `out`, overwrites the gradients of this layer's
  // parameters and, if `din` is not null, writes the gradient with respect to
  // `in` (batch x input_dim). REQUIRES: the last Forward was this batch's,
  // with training = true.
  virtual absl::Status Backward(const float* in, const float* out,
                                const float* dout, int batch, float* din) = 0;

 protected:
  Backend* backend() const { return backend_; }

 private:
  const std::string name_;
  const TensorShape input_;
  const TensorShape output_;
  Backend* const backend_;
};

// y = x * W + b, W is {in, out} and b is {out}. `weight` and `bias` must
// outlive the layer. Requires external synchronization.
class FullyConnectedLayer : public Layer {
 public:
  FullyConnectedLayer(std::string name, int input_dim, int output_dim,
                      Backend* backend, const ParamBuffers* weight,
                      const ParamBuffers* bias);

  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  // dW = in^T * dout, db = column sums of dout, din = dout * W^T.
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;

 private:
  const ParamBuffers* const weight_;
  const ParamBuffers* const bias_;
};

// Elementwise RELU, SIGMOID or TANH. Requires external synchronization.
class ActivationLayer : public Layer {
 public:
  // REQUIRES: type is RELU, SIGMOID or TANH.
  ActivationLayer(std::string name, TensorShape shape, LayerConfig::Type type,
                  Backend* backend);

  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  // din = dout * f'(in), computed from `in` or `out`.
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;

 private:
  const Activation f_;
};

// y = x + b, b is {dim}: a learned bias without a weight (logistic
// regression over a sparse input). `bias` must outlive the layer. Requires
// external synchronization.
class BiasLayer : public Layer {
 public:
  BiasLayer(std::string name, int dim, Backend* backend,
            const ParamBuffers* bias);

  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  // db = column sums of dout, din = dout.
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;

 private:
  const ParamBuffers* const bias_;
};

// 2-D convolution (cross-correlation) with a bias per filter: W is
// {filters, in_channels, k, k}, b is {filters}. `geometry.batch` is ignored.
// `weight` and `bias` must outlive the layer. Requires external
// synchronization.
class Conv2dLayer : public Layer {
 public:
  Conv2dLayer(std::string name, const ConvGeometry& geometry, Backend* backend,
              const ParamBuffers* weight, const ParamBuffers* bias);

  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;

 private:
  const ConvGeometry geometry_;
  const ParamBuffers* const weight_;
  const ParamBuffers* const bias_;
};

// Max or average pooling. `geometry.batch` is ignored. Requires external
// synchronization.
class Pool2dLayer : public Layer {
 public:
  Pool2dLayer(std::string name, const PoolGeometry& geometry, Backend* backend);

  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;

 private:
  const PoolGeometry geometry_;
};

// (C, H, W) -> (C*H*W, 1, 1): the NCHW buffer is already the flat vector,
// so forward and backward copy. Requires external synchronization.
class FlattenLayer : public Layer {
 public:
  FlattenLayer(std::string name, TensorShape input, Backend* backend);

  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;
};

// Inverted dropout: in training each element is zeroed with probability
// `rate` and the others scaled by 1/(1 - rate); at evaluation the identity.
// The k-th training batch (counting from 0) uses the mask of
// MixBits(seed, k), so a run is reproducible and the CPU and CUDA backends
// drop the same elements. Requires external synchronization.
class DropoutLayer : public Layer {
 public:
  // REQUIRES: 0 <= rate < 1.
  DropoutLayer(std::string name, TensorShape shape, float rate, uint64_t seed,
               Backend* backend);

  absl::Status Reserve(int batch) override;
  absl::Status Forward(const float* in, int batch, bool training,
                       float* out) override;
  absl::Status Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) override;

  // Picks the masks of a stream (say, a trainer id: stream 0 is the
  // default) and the position in it (say, the training step), so that
  // trainers draw different masks and a restarted or rolled-back trainer
  // draws the same ones again: the next training batch uses the mask of
  // MixBits(MixBits(seed, stream), batch), or MixBits(seed, batch) for
  // stream 0.
  void SetStream(uint64_t stream, uint64_t batch) {
    stream_ = stream;
    batches_ = batch;
  }

 private:
  const float rate_;
  const uint64_t seed_;
  uint64_t stream_ = 0;
  uint64_t batches_ = 0;  // training batches so far
  BackendBuffer mask_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_LAYERS_H_
