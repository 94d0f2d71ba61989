#include "trainer/model/layer_registry.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/layer_functors.h"

namespace shardps {
namespace {

// Window sizes, strides, filters and per-example activations are bounded
// so that every size computed from them fits an int.
constexpr int kMaxWindow = 4096;
constexpr int64_t kMaxExampleValues = int64_t{1} << 30;

absl::Status WindowError(const LayerConfig& layer, const char* what, int k,
                         int stride, int padding, const TensorShape& in) {
  return absl::InvalidArgumentError(absl::StrCat(
      "layer ", layer.name(), ": ", what, " ", k, " with stride ", stride,
      " and padding ", padding, " does not fit its input ", in.channels, "x",
      in.height, "x", in.width,
      " (needs size > 0, stride > 0, 0 <= padding < size, size <= input + "
      "2 * padding)"));
}

absl::Status CheckWindowBounds(const LayerConfig& layer, int k, int stride) {
  if (k > kMaxWindow || stride > kMaxWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer.name(), ": window ", k, " or stride ",
                     stride, " exceeds ", kMaxWindow));
  }
  return absl::OkStatus();
}

// The layer's output per example, checked to stay below kMaxExampleValues.
absl::StatusOr<TensorShape> CheckedShape(const LayerConfig& layer, int64_t c,
                                         int64_t h, int64_t w) {
  if (c <= 0 || h <= 0 || w <= 0 || c * h * w > kMaxExampleValues) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer.name(), ": output of ", c, "x", h, "x", w,
                     " values per example (at most ", kMaxExampleValues, ")"));
  }
  return TensorShape{static_cast<int>(c), static_cast<int>(h),
                     static_cast<int>(w)};
}

absl::StatusOr<ConvGeometry> ConvGeometryOf(const LayerConfig& layer,
                                            const TensorShape& in) {
  if (layer.filters() <= 0 || layer.filters() > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer.name(), ": CONV2D needs filters in [1, 2^20], got ",
        layer.filters()));
  }
  RETURN_IF_ERROR(
      CheckWindowBounds(layer, layer.kernel_size(), layer.stride()));
  ConvGeometry g;
  g.in_channels = in.channels;
  g.in_height = in.height;
  g.in_width = in.width;
  g.out_channels = layer.filters();
  g.kernel_h = g.kernel_w = layer.kernel_size();
  g.stride = layer.stride() != 0 ? layer.stride() : 1;
  g.padding = layer.padding();
  const int k = layer.kernel_size();
  if (k <= 0 || g.stride <= 0 || g.padding < 0 || g.padding >= k ||
      k > in.height + 2 * g.padding || k > in.width + 2 * g.padding) {
    return WindowError(layer, "kernel_size", k, g.stride, g.padding, in);
  }
  return g;
}

absl::StatusOr<PoolGeometry> PoolGeometryOf(const LayerConfig& layer,
                                            const TensorShape& in) {
  PoolGeometry g;
  g.channels = in.channels;
  g.in_height = in.height;
  g.in_width = in.width;
  g.window = layer.pool_size();
  g.stride = layer.stride() != 0 ? layer.stride() : layer.pool_size();
  g.padding = layer.padding();
  g.mode = layer.type() == LayerConfig::MAX_POOL ? PoolMode::kMax
                                                 : PoolMode::kAverage;
  RETURN_IF_ERROR(CheckWindowBounds(layer, g.window, g.stride));
  const int k = g.window;
  if (k <= 0 || g.stride <= 0 || g.padding < 0 || g.padding >= k ||
      k > in.height + 2 * g.padding || k > in.width + 2 * g.padding) {
    return WindowError(layer, "pool_size", k, g.stride, g.padding, in);
  }
  return g;
}

TensorShape Vector(int dim) { return TensorShape{dim, 1, 1}; }

// --- Plans ---

absl::StatusOr<LayerPlan> PlanFullyConnected(const LayerConfig& layer,
                                             const TensorShape& in) {
  if (layer.output_dim() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer.name(), ": FULLY_CONNECTED needs output_dim > 0, got ",
        layer.output_dim()));
  }
  const int out = layer.output_dim();
  return LayerPlan{Vector(out),
                   {{".weight", {in.size(), out}}, {".bias", {out}}}};
}

absl::StatusOr<LayerPlan> PlanBias(const LayerConfig& layer,
                                   const TensorShape& in) {
  return LayerPlan{Vector(in.size()), {{".bias", {in.size()}}}};
}

absl::StatusOr<LayerPlan> PlanConv2d(const LayerConfig& layer,
                                     const TensorShape& in) {
  ASSIGN_OR_RETURN(const ConvGeometry g, ConvGeometryOf(layer, in));
  ASSIGN_OR_RETURN(
      const TensorShape out,
      CheckedShape(layer, g.out_channels, g.out_height(), g.out_width()));
  return LayerPlan{
      out,
      {{".weight", {g.out_channels, g.in_channels, g.kernel_h, g.kernel_w}},
       {".bias", {g.out_channels}}}};
}

absl::StatusOr<LayerPlan> PlanPool2d(const LayerConfig& layer,
                                     const TensorShape& in) {
  ASSIGN_OR_RETURN(const PoolGeometry g, PoolGeometryOf(layer, in));
  return LayerPlan{TensorShape{g.channels, g.out_height(), g.out_width()}, {}};
}

absl::StatusOr<LayerPlan> PlanFlatten(const LayerConfig& layer,
                                      const TensorShape& in) {
  return LayerPlan{Vector(in.size()), {}};
}

absl::StatusOr<LayerPlan> PlanDropout(const LayerConfig& layer,
                                      const TensorShape& in) {
  if (!(layer.dropout_rate() >= 0.0f && layer.dropout_rate() < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer.name(), ": DROPOUT needs dropout_rate in [0, 1), got ",
        layer.dropout_rate()));
  }
  return LayerPlan{in, {}};
}

absl::StatusOr<LayerPlan> PlanElementwise(const LayerConfig& layer,
                                          const TensorShape& in) {
  return LayerPlan{in, {}};
}

// --- Builders ---

std::unique_ptr<Layer> CreateFullyConnected(const LayerConfig& layer,
                                            const TensorShape& in, uint64_t,
                                            int, Backend* be,
                                            const ParamBuffers* params) {
  return std::make_unique<FullyConnectedLayer>(
      layer.name(), in.size(), layer.output_dim(), be, &params[0], &params[1]);
}

std::unique_ptr<Layer> CreateBias(const LayerConfig& layer,
                                  const TensorShape& in, uint64_t, int,
                                  Backend* be, const ParamBuffers* params) {
  return std::make_unique<BiasLayer>(layer.name(), in.size(), be, &params[0]);
}

std::unique_ptr<Layer> CreateConv2d(const LayerConfig& layer,
                                    const TensorShape& in, uint64_t, int,
                                    Backend* be, const ParamBuffers* params) {
  return std::make_unique<Conv2dLayer>(layer.name(), *ConvGeometryOf(layer, in),
                                       be, &params[0], &params[1]);
}

std::unique_ptr<Layer> CreatePool2d(const LayerConfig& layer,
                                    const TensorShape& in, uint64_t, int,
                                    Backend* be, const ParamBuffers*) {
  return std::make_unique<Pool2dLayer>(layer.name(), *PoolGeometryOf(layer, in),
                                       be);
}

std::unique_ptr<Layer> CreateFlatten(const LayerConfig& layer,
                                     const TensorShape& in, uint64_t, int,
                                     Backend* be, const ParamBuffers*) {
  return std::make_unique<FlattenLayer>(layer.name(), in, be);
}

std::unique_ptr<Layer> CreateDropout(const LayerConfig& layer,
                                     const TensorShape& in, uint64_t model_seed,
                                     int position, Backend* be,
                                     const ParamBuffers*) {
  const uint64_t seed =
      layer.dropout_seed() != 0
          ? layer.dropout_seed()
          : MixBits(model_seed != 0 ? model_seed : 1, position);
  return std::make_unique<DropoutLayer>(layer.name(), in, layer.dropout_rate(),
                                        seed, be);
}

std::unique_ptr<Layer> CreateActivation(const LayerConfig& layer,
                                        const TensorShape& in, uint64_t, int,
                                        Backend* be, const ParamBuffers*) {
  return std::make_unique<ActivationLayer>(layer.name(), in, layer.type(), be);
}

}  // namespace

const LayerKind* FindLayerKind(LayerConfig::Type type) {
  static const LayerKind kFullyConnected = {
      "fc", false, true, PlanFullyConnected, CreateFullyConnected};
  static const LayerKind kRelu = {"relu", false, false, PlanElementwise,
                                  CreateActivation};
  static const LayerKind kSigmoid = {"sigmoid", false, false, PlanElementwise,
                                     CreateActivation};
  static const LayerKind kTanh = {"tanh", false, false, PlanElementwise,
                                  CreateActivation};
  static const LayerKind kBias = {"bias", false, true, PlanBias, CreateBias};
  static const LayerKind kConv = {"conv", true, false, PlanConv2d,
                                  CreateConv2d};
  static const LayerKind kMaxPool = {"maxpool", true, false, PlanPool2d,
                                     CreatePool2d};
  static const LayerKind kAvgPool = {"avgpool", true, false, PlanPool2d,
                                     CreatePool2d};
  static const LayerKind kFlatten = {"flatten", false, false, PlanFlatten,
                                     CreateFlatten};
  static const LayerKind kDropout = {"dropout", false, false, PlanDropout,
                                     CreateDropout};
  switch (type) {
    case LayerConfig::FULLY_CONNECTED:
      return &kFullyConnected;
    case LayerConfig::RELU:
      return &kRelu;
    case LayerConfig::SIGMOID:
      return &kSigmoid;
    case LayerConfig::TANH:
      return &kTanh;
    case LayerConfig::BIAS:
      return &kBias;
    case LayerConfig::CONV2D:
      return &kConv;
    case LayerConfig::MAX_POOL:
      return &kMaxPool;
    case LayerConfig::AVG_POOL:
      return &kAvgPool;
    case LayerConfig::FLATTEN:
      return &kFlatten;
    case LayerConfig::DROPOUT:
      return &kDropout;
    default:
      return nullptr;
  }
}

}  // namespace shardps
