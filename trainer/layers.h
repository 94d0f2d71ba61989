#ifndef SHARDPS_TRAINER_LAYERS_H_
#define SHARDPS_TRAINER_LAYERS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proto/model_config.pb.h"

namespace shardps {

// One trainable parameter table of a model: its values (pulled from the
// pservers) and the gradient of the last batch (pushed to them).
struct ParamTable {
  std::string name;            // "<layer>.weight" or "<layer>.bias"
  std::vector<int64_t> shape;  // {in, out} for weights, {out} for biases
  const LayerConfig* layer;    // owned by the Model; never null
  std::vector<float> value;    // row-major, product(shape) floats
  std::vector<float> grad;     // same size as value
};

// A layer of a sequential model, computing a batch at a time on row-major
// (batch x dim) buffers. Requires external synchronization.
class Layer {
 public:
  Layer(std::string name, int input_dim, int output_dim)
      : name_(std::move(name)),
        input_dim_(input_dim),
        output_dim_(output_dim) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  int input_dim() const { return input_dim_; }
  int output_dim() const { return output_dim_; }

  // out (batch x output_dim) = f(in (batch x input_dim)).
  virtual void Forward(const float* in, int batch, float* out) = 0;

  // Given the forward input `in`, output `out` and the gradient `dout` of the
  // loss with respect to `out`, overwrites the gradients of this layer's
  // parameters and, if `din` is not null, writes the gradient with respect to
  // `in` (batch x input_dim).
  virtual void Backward(const float* in, const float* out, const float* dout,
                        int batch, float* din) = 0;

 private:
  const std::string name_;
  const int input_dim_;
  const int output_dim_;
};

// y = x * W + b, W is {in, out} and b is {out}. Requires external
// synchronization.
class FullyConnectedLayer : public Layer {
 public:
  // `weight` and `bias` must outlive the layer.
  FullyConnectedLayer(std::string name, int input_dim, int output_dim,
                      ParamTable* weight, ParamTable* bias);

  void Forward(const float* in, int batch, float* out) override;
  void Backward(const float* in, const float* out, const float* dout, int batch,
                float* din) override;

 private:
  ParamTable* const weight_;
  ParamTable* const bias_;
};

// Elementwise RELU, SIGMOID or TANH. Requires external synchronization.
class ActivationLayer : public Layer {
 public:
  // REQUIRES: type is RELU, SIGMOID or TANH.
  ActivationLayer(std::string name, int dim, LayerConfig::Type type);

  void Forward(const float* in, int batch, float* out) override;
  void Backward(const float* in, const float* out, const float* dout, int batch,
                float* din) override;

 private:
  const LayerConfig::Type type_;
};

// y = x + b, b is {dim}: a learned bias without a weight (logistic
// regression over a sparse input). Requires external synchronization.
class BiasLayer : public Layer {
 public:
  // `bias` must outlive the layer.
  BiasLayer(std::string name, int dim, ParamTable* bias);

  void Forward(const float* in, int batch, float* out) override;
  void Backward(const float* in, const float* out, const float* dout, int batch,
                float* din) override;

 private:
  ParamTable* const bias_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_LAYERS_H_
