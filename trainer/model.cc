#include "trainer/model.h"

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
#include "glog/logging.h"
#include "kernels/activation_functors.h"

namespace shardps {
namespace {

const char* TypePrefix(LayerConfig::Type type) {
  switch (type) {
    case LayerConfig::FULLY_CONNECTED:
      return "fc";
    case LayerConfig::RELU:
      return "relu";
    case LayerConfig::SIGMOID:
      return "sigmoid";
    case LayerConfig::TANH:
      return "tanh";
    case LayerConfig::BIAS:
      return "bias";
    default:
      return "layer";
  }
}

// SplitMix64 finalizer: spreads (seed, index) over all 64 bits.
uint64_t Mix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

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

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config,
                                                     int input_dim,
                                                     int num_classes) {
  if (input_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", config.name(),
                     ": input_dim must be positive, got ", input_dim));
  }
  std::unique_ptr<Model> model(new Model(config, input_dim, num_classes));
  ModelConfig& cfg = model->config_;
  absl::flat_hash_set<std::string> names;
  int dim = input_dim;
  int last_fc = -1;
  // Pass 1: name and validate the layers, and create the tables (their
  // addresses are stable once the vector is complete).
  for (int i = 0; i < cfg.layers_size(); ++i) {
    LayerConfig* layer = cfg.mutable_layers(i);
    if (layer->name().empty()) {
      layer->set_name(absl::StrCat(TypePrefix(layer->type()), i));
    }
    if (!names.insert(layer->name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", layer->name(), ": duplicate layer name"));
    }
    switch (layer->type()) {
      case LayerConfig::FULLY_CONNECTED: {
        if (layer->output_dim() <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("layer ", layer->name(),
                           ": FULLY_CONNECTED needs output_dim > 0, got ",
                           layer->output_dim()));
        }
        const int out = layer->output_dim();
        ParamTable weight;
        weight.name = absl::StrCat(layer->name(), ".weight");
        weight.shape = {dim, out};
        weight.layer = layer;
        weight.value.assign(static_cast<size_t>(dim) * out, 0.0f);
        weight.grad.assign(weight.value.size(), 0.0f);
        ParamTable bias;
        bias.name = absl::StrCat(layer->name(), ".bias");
        bias.shape = {out};
        bias.layer = layer;
        bias.value.assign(out, 0.0f);
        bias.grad.assign(out, 0.0f);
        model->tables_.push_back(std::move(weight));
        model->tables_.push_back(std::move(bias));
        dim = out;
        last_fc = i;
        break;
      }
      case LayerConfig::BIAS: {
        ParamTable bias;
        bias.name = absl::StrCat(layer->name(), ".bias");
        bias.shape = {dim};
        bias.layer = layer;
        bias.value.assign(dim, 0.0f);
        bias.grad.assign(dim, 0.0f);
        model->tables_.push_back(std::move(bias));
        last_fc = i;
        break;
      }
      case LayerConfig::RELU:
      case LayerConfig::SIGMOID:
      case LayerConfig::TANH:
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", layer->name(), ": unknown layer type ",
                         static_cast<int>(layer->type())));
    }
  }
  if (last_fc < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", cfg.name(),
                     ": needs at least one FULLY_CONNECTED or BIAS layer"));
  }
  LayerConfig last = cfg.layers(last_fc);
  if (last.type() == LayerConfig::BIAS) last.set_output_dim(dim);
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
  // Pass 2: the layers, pointing at the now stable tables.
  dim = input_dim;
  size_t table = 0;
  for (const LayerConfig& layer : cfg.layers()) {
    if (layer.type() == LayerConfig::FULLY_CONNECTED) {
      model->layers_.push_back(std::make_unique<FullyConnectedLayer>(
          layer.name(), dim, layer.output_dim(), &model->tables_[table],
          &model->tables_[table + 1]));
      table += 2;
      dim = layer.output_dim();
    } else if (layer.type() == LayerConfig::BIAS) {
      model->layers_.push_back(std::make_unique<BiasLayer>(
          layer.name(), dim, &model->tables_[table]));
      table += 1;
    } else {
      model->layers_.push_back(
          std::make_unique<ActivationLayer>(layer.name(), dim, layer.type()));
    }
  }
  model->acts_.resize(model->layers_.size());
  model->grads_.resize(model->layers_.size());
  return model;
}

Model::Model(const ModelConfig& config, int input_dim, int num_classes)
    : config_(config), input_dim_(input_dim), num_classes_(num_classes) {}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const ParamTable& t : tables_) n += static_cast<int64_t>(t.value.size());
  return n;
}

void Model::InitializeParameters(uint64_t seed) {
  for (size_t t = 0; t < tables_.size(); ++t) {
    ParamTable& table = tables_[t];
    const bool is_bias = table.shape.size() == 1;
    const int64_t fan_out = table.shape.back();
    // A bias's fan-in is its layer's input: the weight before it, or (a BIAS
    // layer) its own width.
    const bool bias_layer = table.layer->type() == LayerConfig::BIAS;
    const int64_t fan_in = !is_bias     ? table.shape[0]
                           : bias_layer ? fan_out
                                        : tables_[t - 1].shape[0];
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
    Initialize(init, fan_in, fan_out, Mix(seed, t), &table.value);
  }
}

void Model::Reserve(int batch) {
  if (batch <= batch_capacity_) return;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t size = static_cast<size_t>(batch) * layers_[i]->output_dim();
    acts_[i].resize(size);
    grads_[i].resize(size);
  }
  batch_capacity_ = batch;
}

void Model::Forward(const float* x, int batch) {
  Reserve(batch);
  const float* in = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(in, batch, acts_[i].data());
    in = acts_[i].data();
  }
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

BatchStats Model::Loss(const int32_t* labels, int batch, float* dlogits,
                       float* probabilities) const {
  BatchStats stats;
  stats.count = batch;
  const float* logits = acts_.back().data();
  const int c = output_dim();
  const float inv_batch = 1.0f / static_cast<float>(batch);
  if (config_.loss().type() == LossConfig::LOGISTIC) {
    for (int i = 0; i < batch; ++i) {
      const float z = logits[i];
      const float p = SigmoidForward(z);
      if (probabilities != nullptr) probabilities[i] = p;
      const int32_t label = labels[i];
      if (label != 0 && label != 1) {
        if (dlogits != nullptr) dlogits[i] = 0.0f;
        continue;
      }
      const float t = static_cast<float>(label);
      stats.loss_sum += LogisticLoss(z, t);
      if ((p >= 0.5f ? 1 : 0) == label) ++stats.correct;
      if (dlogits != nullptr) dlogits[i] = (p - t) * inv_batch;
    }
    return stats;
  }
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<size_t>(i) * c;
    int argmax = 0;
    for (int j = 1; j < c; ++j) {
      if (z[j] > z[argmax]) argmax = j;
    }
    const float max = z[argmax];
    double sum = 0.0;
    for (int j = 0; j < c; ++j)
      sum += std::exp(static_cast<double>(z[j] - max));
    const double log_sum = std::log(sum);
    if (probabilities != nullptr) {
      float* p = probabilities + static_cast<size_t>(i) * c;
      for (int j = 0; j < c; ++j) {
        p[j] = static_cast<float>(std::exp(z[j] - max - log_sum));
      }
    }
    const int32_t label = labels[i];
    const bool valid = label >= 0 && label < c;
    if (valid) {
      // -log softmax(z)[label] = log(sum exp(z - max)) - (z[label] - max).
      stats.loss_sum += log_sum - static_cast<double>(z[label] - max);
      if (argmax == label) ++stats.correct;
    }
    if (dlogits != nullptr) {
      float* dz = dlogits + static_cast<size_t>(i) * c;
      for (int j = 0; j < c; ++j) {
        const float p = static_cast<float>(std::exp(z[j] - max - log_sum));
        dz[j] = valid ? (p - (j == label ? 1.0f : 0.0f)) * inv_batch : 0.0f;
      }
    }
  }
  return stats;
}

absl::StatusOr<BatchStats> Model::TrainBatch(const float* x,
                                             const int32_t* labels, int batch,
                                             float* input_grad) {
  if (batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch must be positive, got ", batch));
  }
  absl::Status s = CheckLabels(labels, batch);
  if (!s.ok()) return s;
  Forward(x, batch);
  BatchStats stats = Loss(labels, batch, grads_.back().data(), nullptr);
  for (size_t i = layers_.size(); i-- > 0;) {
    const float* in = i == 0 ? x : acts_[i - 1].data();
    float* din = i == 0 ? input_grad : grads_[i - 1].data();
    layers_[i]->Backward(in, acts_[i].data(), grads_[i].data(), batch, din);
  }
  return stats;
}

BatchStats Model::Evaluate(const float* x, const int32_t* labels, int batch,
                           float* probabilities) {
  if (batch <= 0) return BatchStats{};
  if (absl::Status s = CheckLabels(labels, batch); !s.ok()) {
    LOG_FIRST_N(WARNING, 10) << "Evaluate: " << s.message();
  }
  Forward(x, batch);
  return Loss(labels, batch, nullptr, probabilities);
}

}  // namespace shardps
