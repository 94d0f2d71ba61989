#include "trainer/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "kernels/cpu_backend.h"
#include "kernels/layer_functors.h"
#include "trainer/model/layer_registry.h"

namespace shardps {
namespace {

// Uniform in [0, 1) with 24 random bits: exact in float, same everywhere.
float UniformFloat(std::mt19937_64& rng) {
  return static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
}

void Initialize(const InitializerConfig& init, int64_t fan_in, int64_t fan_out,
                uint64_t seed, std::vector<float>* values) {
  std::mt19937_64 rng(seed);
  float limit = 0.0f;
  switch (init.type()) {
    case InitializerConfig::CONSTANT:
      std::fill(values->begin(), values->end(), init.value());
      return;
    case InitializerConfig::UNIFORM:
      limit = init.value();
      break;
    case InitializerConfig::HE_UNIFORM:
      limit = static_cast<float>(std::sqrt(6.0 / static_cast<double>(fan_in)));
      break;
    default:  // XAVIER_UNIFORM
      limit = static_cast<float>(
          std::sqrt(6.0 / static_cast<double>(fan_in + fan_out)));
      break;
  }
  for (float& v : *values) v = (2.0f * UniformFloat(rng) - 1.0f) * limit;
}

// At most this many values in one parameter table (8 GiB of float32).
constexpr int64_t kMaxTableValues = int64_t{1} << 31;

absl::StatusOr<ParamTable> MakeTable(const LayerConfig& layer,
                                     const char* suffix,
                                     std::vector<int64_t> shape) {
  ParamTable t;
  t.name = absl::StrCat(layer.name(), suffix);
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0 || n > kMaxTableValues / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layer.name(), ": table ", t.name, " of shape ",
                       absl::StrJoin(shape, "x"), " has more than ",
                       kMaxTableValues, " values"));
    }
    n *= d;
  }
  t.shape = std::move(shape);
  t.layer = &layer;
  t.value.assign(static_cast<size_t>(n), 0.0f);
  t.grad.assign(static_cast<size_t>(n), 0.0f);
  return t;
}

absl::StatusOr<TensorShape> InputShapeOf(const ModelConfig& cfg,
                                         int input_dim) {
  if (cfg.has_input_shape()) {
    const InputShape& s = cfg.input_shape();
    if (s.channels() <= 0 || s.height() <= 0 || s.width() <= 0 ||
        static_cast<int64_t>(s.channels()) * s.height() * s.width() !=
            input_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model ", cfg.name(), ": input_shape ", s.channels(), "x", s.height(),
          "x", s.width(), " must be positive and multiply to the input width ",
          input_dim));
    }
    return TensorShape{s.channels(), s.height(), s.width()};
  }
  bool image = false;
  for (const LayerConfig& l : cfg.layers()) {
    const LayerKind* kind = FindLayerKind(l.type());
    image = image || (kind != nullptr && kind->image);
  }
  if (!image) return TensorShape{input_dim, 1, 1};
  const int side = static_cast<int>(std::lround(std::sqrt(input_dim)));
  if (static_cast<int64_t>(side) * side != input_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", cfg.name(), ": image layers need input_shape, since the ",
        "input width ", input_dim, " is no square one-channel image"));
  }
  return TensorShape{1, side, side};
}

// Whether the last FULLY_CONNECTED or BIAS layer `last` (its output_dim
// set) fits the loss of `cfg` and the data's `num_classes`.
absl::Status CheckLoss(const ModelConfig& cfg, const LayerConfig& last,
                       int num_classes) {
  switch (cfg.loss().type()) {
    case LossConfig::LOGISTIC:
      if (last.output_dim() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", last.name(), ": LOGISTIC loss needs the last ",
            "FULLY_CONNECTED or BIAS layer to have output_dim 1, got ",
            last.output_dim()));
      }
      if (num_classes > 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("model ", cfg.name(),
                         ": LOGISTIC loss needs labels 0/1, but the data has ",
                         num_classes, " classes"));
      }
      break;
    case LossConfig::SOFTMAX_CROSS_ENTROPY:
      if (num_classes < 2 || last.output_dim() != num_classes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", last.name(), ": SOFTMAX_CROSS_ENTROPY loss needs the ",
            "last FULLY_CONNECTED layer to have output_dim == num_classes (",
            num_classes, ", at least 2), got ", last.output_dim()));
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("model ", cfg.name(), ": unknown loss type ",
                       static_cast<int>(cfg.loss().type())));
  }
  return absl::OkStatus();
}

// The model's output: the last FULLY_CONNECTED or BIAS layer (`last_fc`,
// whose input shape is in_shapes[last_fc]) gives `dim` values, one per
// class of the loss; only elementwise layers follow it.
absl::Status CheckOutput(const ModelConfig& cfg,
                         const std::vector<TensorShape>& in_shapes, int last_fc,
                         int dim, int num_classes) {
  if (last_fc < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", cfg.name(),
                     ": needs at least one FULLY_CONNECTED or BIAS layer"));
  }
  LayerConfig last = cfg.layers(last_fc);
  if (last.type() == LayerConfig::BIAS) {
    last.set_output_dim(in_shapes[last_fc].size());
  }
  RETURN_IF_ERROR(CheckLoss(cfg, last, num_classes));
  if (dim != last.output_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", cfg.layers(cfg.layers_size() - 1).name(),
                     ": the model output has ", dim, " values, but the last ",
                     "FULLY_CONNECTED or BIAS layer has ", last.output_dim(),
                     "; only elementwise layers may follow it"));
  }
  return absl::OkStatus();
}

// Names layer `i` when it has none (its kind's prefix and `i`: "fc0"),
// then checks that the name is not in `names` (and adds it) and that the
// type is known; the layer's kind.
absl::StatusOr<const LayerKind*> NameLayer(
    int i, LayerConfig* layer, absl::flat_hash_set<std::string>* names) {
  const LayerKind* kind = FindLayerKind(layer->type());
  if (layer->name().empty()) {
    layer->set_name(absl::StrCat(kind != nullptr ? kind->prefix : "layer", i));
  }
  if (!names->insert(layer->name()).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer->name(), ": duplicate layer name"));
  }
  if (kind == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer->name(), ": unknown layer type ",
                     static_cast<int>(layer->type())));
  }
  return kind;
}

// The indices of each layer's tables: layer i has the tables from
// first_table[i] to first_table[i + 1] (the last entry ends the last layer).
std::vector<std::vector<int>> TablesByLayer(
    const std::vector<size_t>& first_table) {
  std::vector<std::vector<int>> layer_tables;
  for (size_t i = 0; i + 1 < first_table.size(); ++i) {
    layer_tables.emplace_back();
    for (size_t t = first_table[i]; t < first_table[i + 1]; ++t) {
      layer_tables.back().push_back(static_cast<int>(t));
    }
  }
  return layer_tables;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config, int input_dim, int num_classes,
    std::unique_ptr<Backend> backend) {
  if (input_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", config.name(),
                     ": input_dim must be positive, got ", input_dim));
  }
  std::unique_ptr<Model> model(new Model(config, input_dim, num_classes));
  model->backend_ =
      backend != nullptr ? std::move(backend) : std::make_unique<CpuBackend>();
  ModelConfig& cfg = model->config_;
  absl::flat_hash_set<std::string> names;
  ASSIGN_OR_RETURN(const TensorShape input_shape, InputShapeOf(cfg, input_dim));
  TensorShape shape = input_shape;
  int last_fc = -1;
  int dim = input_dim;
  // Pass 1: name and validate the layers, follow the shapes, and create the
  // tables (their addresses are stable once the vector is complete).
  std::vector<TensorShape> in_shapes;
  std::vector<size_t> first_table;
  for (int i = 0; i < cfg.layers_size(); ++i) {
    LayerConfig* layer = cfg.mutable_layers(i);
    ASSIGN_OR_RETURN(const LayerKind* kind, NameLayer(i, layer, &names));
    in_shapes.push_back(shape);
    first_table.push_back(model->tables_.size());
    ASSIGN_OR_RETURN(LayerPlan plan, kind->plan(*layer, shape));
    for (auto& [suffix, table_shape] : plan.tables) {
      ASSIGN_OR_RETURN(ParamTable t,
                       MakeTable(*layer, suffix.c_str(), table_shape));
      model->tables_.push_back(std::move(t));
    }
    shape = plan.output;
    if (kind->ends_dense) last_fc = i;
  }
  dim = shape.size();
  RETURN_IF_ERROR(CheckOutput(cfg, in_shapes, last_fc, dim, num_classes));
  first_table.push_back(model->tables_.size());
  model->layer_tables_ = TablesByLayer(first_table);
  RETURN_IF_ERROR(model->BindBuffers());
  Backend* be = model->backend_.get();
  // Pass 2: the layers, pointing at the now stable parameter buffers.
  for (int i = 0; i < cfg.layers_size(); ++i) {
    const LayerConfig& layer = cfg.layers(i);
    model->layers_.push_back(
        FindLayerKind(layer.type())
            ->create(layer, in_shapes[i], cfg.seed(), i, be,
                     model->params_.data() + first_table[i]));
  }
  model->acts_.resize(model->layers_.size());
  model->grads_.resize(model->layers_.size());
  return model;
}

absl::Status Model::BindBuffers() {
  // Device copies of the tables, and where the layers find them.
  Backend* be = backend_.get();
  const size_t num_tables = tables_.size();
  params_.resize(num_tables);
  if (be->host_memory()) return absl::OkStatus();
  device_values_.resize(num_tables);
  device_grads_.resize(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const size_t n = tables_[t].value.size();
    RETURN_IF_ERROR(device_values_[t].Allocate(be, n));
    RETURN_IF_ERROR(device_grads_[t].Allocate(be, n));
    params_[t] =
        ParamBuffers{device_values_[t].data(), device_grads_[t].data()};
  }
  return absl::OkStatus();
}

Model::Model(const ModelConfig& config, int input_dim, int num_classes)
    : config_(config), input_dim_(input_dim), num_classes_(num_classes) {}

void Model::SetDropoutStream(uint64_t stream, int64_t step) {
  for (auto& l : layers_) {
    if (auto* d = dynamic_cast<DropoutLayer*>(l.get())) {
      d->SetStream(stream, static_cast<uint64_t>(step));
    }
  }
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const ParamTable& t : tables_) n += static_cast<int64_t>(t.value.size());
  return n;
}

void Model::InitializeParameters(uint64_t seed) {
  // Fan-in and fan-out of a weight: {in, out}, or {filters, in_channels,
  // k, k} for a convolution.
  auto fans = [](const std::vector<int64_t>& shape) {
    if (shape.size() == 4) {
      const int64_t area = shape[2] * shape[3];
      return std::make_pair(shape[1] * area, shape[0] * area);
    }
    return std::make_pair(shape[0], shape.back());
  };
  for (size_t t = 0; t < tables_.size(); ++t) {
    ParamTable& table = tables_[t];
    const bool is_bias = table.shape.size() == 1;
    // A bias's fan-in is its layer's input: the weight's before it, or (a
    // BIAS layer) its own width.
    const bool bias_layer = table.layer->type() == LayerConfig::BIAS;
    const int64_t fan_out =
        is_bias ? table.shape.back() : fans(table.shape).second;
    const int64_t fan_in = !is_bias     ? fans(table.shape).first
                           : bias_layer ? fan_out
                                        : fans(tables_[t - 1].shape).first;
    InitializerConfig init;
    if (is_bias) {
      if (table.layer->has_bias_init()) {
        init = table.layer->bias_init();
      } else {
        init.set_type(InitializerConfig::CONSTANT);
        init.set_value(0.0f);
      }
    } else if (table.layer->has_weight_init()) {
      init = table.layer->weight_init();
    }  // else XAVIER_UNIFORM, the proto default.
    Initialize(init, fan_in, fan_out, MixBits(seed, t), &table.value);
  }
}

absl::Status Model::Reserve(int batch) {
  if (batch <= batch_capacity_) return absl::OkStatus();
  Backend* be = backend_.get();
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t size = static_cast<size_t>(batch) * layers_[i]->output_dim();
    RETURN_IF_ERROR(acts_[i].Allocate(be, size));
    RETURN_IF_ERROR(grads_[i].Allocate(be, size));
    RETURN_IF_ERROR(layers_[i]->Reserve(batch));
  }
  if (!be->host_memory()) {
    const size_t size = static_cast<size_t>(batch) * input_dim_;
    RETURN_IF_ERROR(input_.Allocate(be, size));
    RETURN_IF_ERROR(input_grad_.Allocate(be, size));
  }
  batch_capacity_ = batch;
  return absl::OkStatus();
}

absl::Status Model::BindParameters(const std::vector<int>& tables) {
  for (int t : tables) {
    ParamTable& table = tables_[t];
    if (backend_->host_memory()) {
      params_[t] = ParamBuffers{table.value.data(), table.grad.data()};
    } else {
      RETURN_IF_ERROR(backend_->Upload(table.value.data(), table.value.size(),
                                       params_[t].value));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::Forward(const float* x, int batch, bool training,
                            const LayerHooks* hooks) {
  RETURN_IF_ERROR(Reserve(batch));
  const float* in = x;
  if (!backend_->host_memory()) {
    RETURN_IF_ERROR(backend_->Upload(x, static_cast<size_t>(batch) * input_dim_,
                                     input_.data()));
    in = input_.data();
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::vector<int>& tables = layer_tables_[i];
    if (!tables.empty() && hooks != nullptr && hooks->before_forward) {
      RETURN_IF_ERROR(hooks->before_forward(tables));
    }
    // Each layer's values are taken (uploaded) just before it runs.
    RETURN_IF_ERROR(BindParameters(tables));
    RETURN_IF_ERROR(layers_[i]->Forward(in, batch, training, acts_[i].data()));
    in = acts_[i].data();
  }
  return absl::OkStatus();
}

absl::Status Model::CheckLabels(const int32_t* labels, int batch) const {
  const int32_t limit =
      config_.loss().type() == LossConfig::LOGISTIC ? 2 : num_classes_;
  for (int i = 0; i < batch; ++i) {
    if (labels[i] < 0 || labels[i] >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("example ", i, " of the batch has label ", labels[i],
                       ", outside [0, ", limit, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> Model::Loss(const int32_t* labels, int batch,
                                       float* dlogits, float* probabilities) {
  LossSums sums;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  if (config_.loss().type() == LossConfig::LOGISTIC) {
    RETURN_IF_ERROR(backend_->LogisticLoss(acts_.back().data(), labels, batch,
                                           inv_batch, dlogits, probabilities,
                                           &sums));
  } else {
    RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(
        acts_.back().data(), labels, batch, output_dim(), inv_batch, dlogits,
        probabilities, &sums));
  }
  BatchStats stats;
  stats.count = batch;
  stats.loss_sum = sums.loss_sum;
  stats.correct = sums.correct;
  return stats;
}

absl::StatusOr<BatchStats> Model::TrainBatch(const float* x,
                                             const int32_t* labels, int batch,
                                             float* input_grad,
                                             const LayerHooks* hooks) {
  if (batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch must be positive, got ", batch));
  }
  RETURN_IF_ERROR(CheckLabels(labels, batch));
  RETURN_IF_ERROR(Forward(x, batch, /*training=*/true, hooks));
  ASSIGN_OR_RETURN(BatchStats stats,
                   Loss(labels, batch, grads_.back().data(), nullptr));
  const bool host = backend_->host_memory();
  const float* x_in = host ? x : input_.data();
  float* x_grad = input_grad == nullptr ? nullptr
                  : host                ? input_grad
                                        : input_grad_.data();
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? x_in : acts_[i - 1].data();
    float* din = i == 0 ? x_grad : grads_[i - 1].data();
    RETURN_IF_ERROR(layers_[i]->Backward(in, acts_[i].data(), grads_[i].data(),
                                         batch, din));
    const std::vector<int>& tables = layer_tables_[i];
    const bool hook =
        !tables.empty() && hooks != nullptr && hooks->after_backward;
    if (!host) {
      // Queued: one wait per hooked layer, else one for the whole step.
      for (int t : tables) {
        RETURN_IF_ERROR(backend_->DownloadAsync(
            params_[t].grad, tables_[t].grad.size(), tables_[t].grad.data()));
      }
      if (hook) RETURN_IF_ERROR(backend_->Synchronize());
    }
    if (hook) RETURN_IF_ERROR(hooks->after_backward(tables));
  }
  if (!host) {
    if (input_grad != nullptr) {
      RETURN_IF_ERROR(backend_->DownloadAsync(
          x_grad, static_cast<size_t>(batch) * input_dim_, input_grad));
    }
    RETURN_IF_ERROR(backend_->Synchronize());
  }
  return stats;
}

absl::StatusOr<BatchStats> Model::Evaluate(const float* x,
                                           const int32_t* labels, int batch,
                                           float* probabilities) {
  if (batch <= 0) return BatchStats{};
  if (absl::Status s = CheckLabels(labels, batch); !s.ok()) {
    LOG_FIRST_N(WARNING, 10) << "Evaluate: " << s.message();
  }
  RETURN_IF_ERROR(Forward(x, batch, /*training=*/false));
  return Loss(labels, batch, nullptr, probabilities);
}

}  // namespace shardps
