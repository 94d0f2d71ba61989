#ifndef SHARDPS_COMMON_TRANSPORT_DENSE_VALUE_LANE_H_
#define SHARDPS_COMMON_TRANSPORT_DENSE_VALUE_LANE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace shardps {

// Where a call's dense float32 values are when its transport moves them
// outside the messages (a trainer's shared region on the pserver's host,
// pserver/service/shared_regions.h): a pull's values are written to it and
// a push's read from it, at the offsets the messages' blocks name
// (shared_offset). The binding that resolved the call hands it to the
// request handler, which checks every block against the store and never
// sees what is behind it. Thread-safe; the other side may write the same
// bytes at any time, so a push's values are read (copied) once, before
// they are checked.
class DenseValueLane {
 public:
  virtual ~DenseValueLane() = default;
  // OK when `floats` float32 values fit at `offset`; INVALID_ARGUMENT
  // naming `what` otherwise.
  virtual absl::Status Check(uint64_t offset, int64_t floats,
                             const char* what) const = 0;
  // Copies `values` to `offset`. REQUIRES: Check(offset, values.size()).
  virtual void Write(uint64_t offset, absl::Span<const float> values) const = 0;
  // Copies to.size() values from `offset` into `to`. REQUIRES:
  // Check(offset, to.size()).
  virtual void Read(uint64_t offset, absl::Span<float> to) const = 0;
  // The `floats` values at `offset` in place, when nobody else can write
  // them while the call runs (a lane of the pserver's own memory): a push
  // then reads them there, without the copy Read makes. Null by default.
  // REQUIRES: Check(offset, floats).
  virtual const float* Stable(uint64_t /*offset*/, int64_t /*floats*/) const {
    return nullptr;
  }
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_DENSE_VALUE_LANE_H_
