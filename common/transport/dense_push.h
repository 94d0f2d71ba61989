#ifndef SHARDPS_COMMON_TRANSPORT_DENSE_PUSH_H_
#define SHARDPS_COMMON_TRANSPORT_DENSE_PUSH_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// The values of one block of a dense push, where they already are (the
// trainer's gradient, or its encoded form).
struct DenseValuesRef {
  uint32_t table_id = 0;
  uint32_t block = 0;
  ValueEncoding encoding = FLOAT32;
  absl::string_view bytes;
  // With PushRequest.shared_region: where the values are in the region
  // (`bytes` is then empty).
  uint64_t shared_offset = 0;
};

// A dense push whose values are referenced, not held: `header` carries
// every field of the PushRequest but `blocks` (and no sparse rows).
struct DensePush {
  PushRequest header;
  std::vector<DenseValuesRef> blocks;
};

// The PushRequest `push` stands for, values copied (what a client without a
// zero-copy path sends, and what the pserver receives either way).
PushRequest ToPushRequest(const DensePush& push);

// ToPushRequest(push).ByteSizeLong(), without copying the values.
size_t DensePushByteSize(const DensePush& push);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_DENSE_PUSH_H_
