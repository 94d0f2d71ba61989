#ifndef SHARDPS_COMMON_MODEL_EXPORT_INITIAL_ROW_H_
#define SHARDPS_COMMON_MODEL_EXPORT_INITIAL_ROW_H_

#include <algorithm>
#include <cstdint>

#include "common/placement/shard_map.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// SplitMix64: a counter-based generator, so a row's values depend only on
// (seed, key, position).
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The value of a sparse row that has none stored: what a pserver reads for
// a key it holds no row of, and what a reader of an exported model gives
// for one (docs/saved_model.md). `dim` floats to `out`, from `init` and the
// key only, the same on every machine.
inline void InitialSparseRow(const RowInitializer& init, int dim,
                             uint64_t key, float* out) {
  switch (init.type()) {
    case RowInitializer::CONSTANT:
      std::fill(out, out + dim, init.scale());
      return;
    case RowInitializer::UNIFORM: {
      uint64_t state = Mix64(init.seed() ^ Mix64(key));
      for (int j = 0; j < dim; ++j) {
        // 24 random bits to a float in [0, 1), exactly, on any machine.
        const float u =
            static_cast<float>(SplitMix64(&state) >> 40) * (1.0f / 16777216.0f);
        out[j] = (2.0f * u - 1.0f) * init.scale();
      }
      return;
    }
    default:
      std::fill(out, out + dim, 0.0f);
  }
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_MODEL_EXPORT_INITIAL_ROW_H_
