#ifndef SHARDPS_TRAINER_MODEL_LAYER_REGISTRY_H_
#define SHARDPS_TRAINER_MODEL_LAYER_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "proto/model_config.pb.h"
#include "trainer/model/layers.h"

namespace shardps {

// What a layer of a config makes of its input, known before any layer is
// built.
struct LayerPlan {
  TensorShape output;
  // The layer's parameter tables, in order: a name suffix (".weight",
  // ".bias") and a shape.
  std::vector<std::pair<std::string, std::vector<int64_t>>> tables;
};

// One kind of layer (docs/config.md): how an unnamed one is named, how its
// config is checked against its input shape, and how it is built. Model
// looks every layer up here; a new kind of layer is one entry of the
// registry (layer_registry.cc) and its Layer class (layers.h).
struct LayerKind {
  // Unnamed layers are named prefix + position ("fc0", "relu1").
  const char* prefix;
  // The kind needs an image input (NCHW), not a vector.
  bool image;
  // The kind's output is what the loss sees last: FULLY_CONNECTED and BIAS
  // (elementwise layers may follow it).
  bool ends_dense;
  // Checks `layer` on input shape `in` and plans it; INVALID_ARGUMENT naming
  // the layer.
  absl::StatusOr<LayerPlan> (*plan)(const LayerConfig& layer,
                                    const TensorShape& in);
  // Builds a planned layer on `backend`; `params` points at the buffers of
  // its tables, in plan order, and must outlive the layer. `model_seed` and
  // `position` seed a dropout mask when the layer names no seed.
  std::unique_ptr<Layer> (*create)(const LayerConfig& layer,
                                   const TensorShape& in, uint64_t model_seed,
                                   int position, Backend* backend,
                                   const ParamBuffers* params);
};

// The kind of `type`; null for a type the registry does not know.
const LayerKind* FindLayerKind(LayerConfig::Type type);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_MODEL_LAYER_REGISTRY_H_
