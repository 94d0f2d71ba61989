#include "trainer/model/layers.h"

#include <cstddef>
#include <utility>

#include "base/status_macros.h"
#include "glog/logging.h"
#include "kernels/layer_functors.h"

namespace shardps {
namespace {

TensorShape Vector(int dim) { return TensorShape{dim, 1, 1}; }

Activation ToActivation(LayerConfig::Type type) {
  switch (type) {
    case LayerConfig::RELU:
      return Activation::kRelu;
    case LayerConfig::SIGMOID:
      return Activation::kSigmoid;
    case LayerConfig::TANH:
      return Activation::kTanh;
    default:
      LOG(FATAL) << "not an activation: " << LayerConfig::Type_Name(type);
  }
}

size_t Elements(int batch, int dim) {
  return static_cast<size_t>(batch) * static_cast<size_t>(dim);
}

// `g` for a batch of `batch` examples.
template <typename Geometry>
Geometry WithBatch(Geometry g, int batch) {
  g.batch = batch;
  return g;
}

}  // namespace

FullyConnectedLayer::FullyConnectedLayer(std::string name, int input_dim,
                                         int output_dim, Backend* backend,
                                         const ParamBuffers* weight,
                                         const ParamBuffers* bias)
    : Layer(std::move(name), Vector(input_dim), Vector(output_dim), backend),
      weight_(weight),
      bias_(bias) {}

absl::Status FullyConnectedLayer::Forward(const float* in, int batch,
                                          bool training, float* out) {
  const int n = output_dim();
  // out = in (batch x in) * W (in x out), then + b per row.
  RETURN_IF_ERROR(backend()->Gemm(false, false, batch, n, input_dim(), 1.0f, in,
                                  input_dim(), weight_->value, n, 0.0f, out,
                                  n));
  return backend()->BiasForward(bias_->value, batch, n, 1, out, out);
}

absl::Status FullyConnectedLayer::Backward(const float* in, const float* out,
                                           const float* dout, int batch,
                                           float* din) {
  const int n = output_dim();
  // dW (in x out) = in^T (in x batch) * dout (batch x out).
  RETURN_IF_ERROR(backend()->Gemm(true, false, input_dim(), n, batch, 1.0f, in,
                                  input_dim(), dout, n, 0.0f, weight_->grad,
                                  n));
  // db = column sums of dout.
  RETURN_IF_ERROR(backend()->BiasBackward(dout, batch, n, 1, bias_->grad));
  if (din == nullptr) return absl::OkStatus();
  // din (batch x in) = dout (batch x out) * W^T (out x in).
  return backend()->Gemm(false, true, batch, input_dim(), n, 1.0f, dout, n,
                         weight_->value, n, 0.0f, din, input_dim());
}

ActivationLayer::ActivationLayer(std::string name, TensorShape shape,
                                 LayerConfig::Type type, Backend* backend)
    : Layer(std::move(name), shape, shape, backend), f_(ToActivation(type)) {}

absl::Status ActivationLayer::Forward(const float* in, int batch, bool training,
                                      float* out) {
  return backend()->ActivationForward(f_, in, Elements(batch, output_dim()),
                                      out);
}

absl::Status ActivationLayer::Backward(const float* in, const float* out,
                                       const float* dout, int batch,
                                       float* din) {
  if (din == nullptr) return absl::OkStatus();
  return backend()->ActivationBackward(f_, in, out, dout,
                                       Elements(batch, output_dim()), din);
}

BiasLayer::BiasLayer(std::string name, int dim, Backend* backend,
                     const ParamBuffers* bias)
    : Layer(std::move(name), Vector(dim), Vector(dim), backend), bias_(bias) {}

absl::Status BiasLayer::Forward(const float* in, int batch, bool training,
                                float* out) {
  return backend()->BiasForward(bias_->value, batch, output_dim(), 1, in, out);
}

absl::Status BiasLayer::Backward(const float* in, const float* out,
                                 const float* dout, int batch, float* din) {
  RETURN_IF_ERROR(
      backend()->BiasBackward(dout, batch, output_dim(), 1, bias_->grad));
  if (din == nullptr) return absl::OkStatus();
  return backend()->Copy(dout, Elements(batch, output_dim()), din);
}

Conv2dLayer::Conv2dLayer(std::string name, const ConvGeometry& geometry,
                         Backend* backend, const ParamBuffers* weight,
                         const ParamBuffers* bias)
    : Layer(std::move(name),
            TensorShape{geometry.in_channels, geometry.in_height,
                        geometry.in_width},
            TensorShape{geometry.out_channels, geometry.out_height(),
                        geometry.out_width()},
            backend),
      geometry_(geometry),
      weight_(weight),
      bias_(bias) {}

absl::Status Conv2dLayer::Forward(const float* in, int batch, bool training,
                                  float* out) {
  return backend()->Conv2dForward(WithBatch(geometry_, batch), in,
                                  weight_->value, bias_->value, out);
}

absl::Status Conv2dLayer::Backward(const float* in, const float* out,
                                   const float* dout, int batch, float* din) {
  return backend()->Conv2dBackward(WithBatch(geometry_, batch), in,
                                   weight_->value, dout, weight_->grad,
                                   bias_->grad, din);
}

Pool2dLayer::Pool2dLayer(std::string name, const PoolGeometry& geometry,
                         Backend* backend)
    : Layer(
          std::move(name),
          TensorShape{geometry.channels, geometry.in_height, geometry.in_width},
          TensorShape{geometry.channels, geometry.out_height(),
                      geometry.out_width()},
          backend),
      geometry_(geometry) {}

absl::Status Pool2dLayer::Forward(const float* in, int batch, bool training,
                                  float* out) {
  return backend()->Pool2dForward(WithBatch(geometry_, batch), in, out);
}

absl::Status Pool2dLayer::Backward(const float* in, const float* out,
                                   const float* dout, int batch, float* din) {
  if (din == nullptr) return absl::OkStatus();
  return backend()->Pool2dBackward(WithBatch(geometry_, batch), in, out, dout,
                                   din);
}

FlattenLayer::FlattenLayer(std::string name, TensorShape input,
                           Backend* backend)
    : Layer(std::move(name), input, Vector(input.size()), backend) {}

absl::Status FlattenLayer::Forward(const float* in, int batch, bool training,
                                   float* out) {
  return backend()->Copy(in, Elements(batch, output_dim()), out);
}

absl::Status FlattenLayer::Backward(const float* in, const float* out,
                                    const float* dout, int batch, float* din) {
  if (din == nullptr) return absl::OkStatus();
  return backend()->Copy(dout, Elements(batch, output_dim()), din);
}

DropoutLayer::DropoutLayer(std::string name, TensorShape shape, float rate,
                           uint64_t seed, Backend* backend)
    : Layer(std::move(name), shape, shape, backend), rate_(rate), seed_(seed) {
  CHECK(rate >= 0.0f && rate < 1.0f) << rate;
}

absl::Status DropoutLayer::Reserve(int batch) {
  const size_t n = Elements(batch, output_dim());
  if (n <= mask_.size()) return absl::OkStatus();
  return mask_.Allocate(backend(), n);
}

absl::Status DropoutLayer::Forward(const float* in, int batch, bool training,
                                   float* out) {
  const size_t n = Elements(batch, output_dim());
  if (!training) return backend()->Copy(in, n, out);
  RETURN_IF_ERROR(Reserve(batch));
  const uint64_t seed = stream_ == 0 ? seed_ : MixBits(seed_, stream_);
  return backend()->DropoutForward(rate_, MixBits(seed, batches_++), in, n,
                                   mask_.data(), out);
}

absl::Status DropoutLayer::Backward(const float* in, const float* out,
                                    const float* dout, int batch, float* din) {
  if (din == nullptr) return absl::OkStatus();
  return backend()->DropoutBackward(mask_.data(), dout,
                                    Elements(batch, output_dim()), din);
}

}  // namespace shardps
