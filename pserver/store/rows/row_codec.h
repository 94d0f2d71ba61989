#ifndef SHARDPS_PSERVER_STORE_ROWS_ROW_CODEC_H_
#define SHARDPS_PSERVER_STORE_ROWS_ROW_CODEC_H_

#include <cstdint>

#include "proto/ps_service.pb.h"

namespace shardps {

// How a sparse table holds the floats of a row (its storage_type): float32
// as they are, or bfloat16 or IEEE half in two bytes each. Arithmetic stays
// float32: a row is decoded, updated and encoded again. Encoding after an
// update rounds stochastically (Gupta et al. 2015; FBGEMM's
// stochastic_rounding): a value between two representable neighbours
// becomes the upper one with probability proportional to its distance from
// the lower, so rounding errors average out over updates instead of small
// updates being lost. The random bits come from a hash of a seed and the
// element's position: the same row at the same update rounds the same way
// on every run and every replica. Finite values stay finite: past the
// format's largest value they saturate. Thread-safe (immutable).
class RowCodec {
 public:
  explicit RowCodec(SparseTableOptions::RowStorage type);

  SparseTableOptions::RowStorage type() const { return type_; }
  bool is_float32() const { return type_ == SparseTableOptions::FLOAT32; }
  int bytes_per_float() const { return is_float32() ? 4 : 2; }

  // dst[i] = the float of element i of `src` (n elements).
  void Decode(const void* src, int n, float* dst) const;
  // Rounds to the nearest representable value (ties to even): restores,
  // where a float32 checkpoint's values are written into the table.
  void EncodeNearest(const float* src, int n, void* dst) const;
  // Rounds stochastically with the bits of `seed` (see above).
  void EncodeStochastic(const float* src, int n, uint64_t seed,
                        void* dst) const;

  // The single-value conversions, for tests.
  static uint16_t ToBf16(float x, uint32_t random16);  // 0: truncate
  static uint16_t ToBf16Nearest(float x);
  static float FromBf16(uint16_t h);
  static uint16_t ToFp16(float x, uint32_t random16, bool nearest);
  static float FromFp16(uint16_t h);

 private:
  const SparseTableOptions::RowStorage type_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_ROWS_ROW_CODEC_H_
