#include "trainer/layers.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "glog/logging.h"
#include "kernels/activation_functors.h"
#include "kernels/blas.h"

namespace shardps {

FullyConnectedLayer::FullyConnectedLayer(std::string name, int input_dim,
                                         int output_dim, ParamTable* weight,
                                         ParamTable* bias)
    : Layer(std::move(name), input_dim, output_dim),
      weight_(weight),
      bias_(bias) {
  CHECK_EQ(weight_->value.size(),
           static_cast<size_t>(input_dim) * static_cast<size_t>(output_dim));
  CHECK_EQ(bias_->value.size(), static_cast<size_t>(output_dim));
}

void FullyConnectedLayer::Forward(const float* in, int batch, float* out) {
  const int n = output_dim();
  const float* b = bias_->value.data();
  for (int i = 0; i < batch; ++i) {
    float* row = out + static_cast<size_t>(i) * n;
    for (int j = 0; j < n; ++j) row[j] = b[j];
  }
  // out += in (batch x in) * W (in x out).
  Gemm(false, false, batch, n, input_dim(), 1.0f, in, input_dim(),
       weight_->value.data(), n, 1.0f, out, n);
}

void FullyConnectedLayer::Backward(const float* in, const float* out,
                                   const float* dout, int batch, float* din) {
  const int n = output_dim();
  // dW (in x out) = in^T (in x batch) * dout (batch x out).
  Gemm(true, false, input_dim(), n, batch, 1.0f, in, input_dim(), dout, n, 0.0f,
       weight_->grad.data(), n);
  // db = column sums of dout.
  float* db = bias_->grad.data();
  for (int j = 0; j < n; ++j) db[j] = 0.0f;
  for (int i = 0; i < batch; ++i) {
    const float* row = dout + static_cast<size_t>(i) * n;
    for (int j = 0; j < n; ++j) db[j] += row[j];
  }
  if (din != nullptr) {
    // din (batch x in) = dout (batch x out) * W^T (out x in).
    Gemm(false, true, batch, input_dim(), n, 1.0f, dout, n,
         weight_->value.data(), n, 0.0f, din, input_dim());
  }
}

ActivationLayer::ActivationLayer(std::string name, int dim,
                                 LayerConfig::Type type)
    : Layer(std::move(name), dim, dim), type_(type) {
  CHECK(type == LayerConfig::RELU || type == LayerConfig::SIGMOID ||
        type == LayerConfig::TANH)
      << LayerConfig::Type_Name(type);
}

void ActivationLayer::Forward(const float* in, int batch, float* out) {
  const size_t size = static_cast<size_t>(batch) * output_dim();
  switch (type_) {
    case LayerConfig::RELU:
      for (size_t i = 0; i < size; ++i) out[i] = ReluForward(in[i]);
      break;
    case LayerConfig::SIGMOID:
      for (size_t i = 0; i < size; ++i) out[i] = SigmoidForward(in[i]);
      break;
    default:
      for (size_t i = 0; i < size; ++i) out[i] = TanhForward(in[i]);
      break;
  }
}

void ActivationLayer::Backward(const float* in, const float* out,
                               const float* dout, int batch, float* din) {
  if (din == nullptr) return;
  const size_t size = static_cast<size_t>(batch) * output_dim();
  switch (type_) {
    case LayerConfig::RELU:
      for (size_t i = 0; i < size; ++i) din[i] = ReluBackward(out[i], dout[i]);
      break;
    case LayerConfig::SIGMOID:
      for (size_t i = 0; i < size; ++i) {
        din[i] = SigmoidBackward(out[i], dout[i]);
      }
      break;
    default:
      for (size_t i = 0; i < size; ++i) din[i] = TanhBackward(out[i], dout[i]);
      break;
  }
}

BiasLayer::BiasLayer(std::string name, int dim, ParamTable* bias)
    : Layer(std::move(name), dim, dim), bias_(bias) {}

void BiasLayer::Forward(const float* in, int batch, float* out) {
  const int n = output_dim();
  const float* b = bias_->value.data();
  for (int r = 0; r < batch; ++r) {
    for (int j = 0; j < n; ++j) out[r * n + j] = in[r * n + j] + b[j];
  }
}

void BiasLayer::Backward(const float* in, const float* out, const float* dout,
                         int batch, float* din) {
  const int n = output_dim();
  float* g = bias_->grad.data();
  std::fill(g, g + n, 0.0f);
  for (int r = 0; r < batch; ++r) {
    for (int j = 0; j < n; ++j) g[j] += dout[r * n + j];
  }
  if (din != nullptr) {
    std::copy(dout, dout + static_cast<size_t>(batch) * n, din);
  }
}

}  // namespace shardps
