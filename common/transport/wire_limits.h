#ifndef SHARDPS_COMMON_TRANSPORT_WIRE_LIMITS_H_
#define SHARDPS_COMMON_TRANSPORT_WIRE_LIMITS_H_

#include <cstddef>

namespace shardps {

// Requests and replies carry at most this many bytes of values; larger
// transfers are cut into several calls. PaddlePaddle's gRPC measurements
// peaked at 4 MB messages, and bigger buffers cost memory without speed.
constexpr size_t kMaxChunkBytes = 4 << 20;

// The gRPC message limit that pservers and clients set, with room above
// kMaxChunkBytes for framing and a block larger than a chunk.
constexpr int kMaxGrpcMessageBytes = 64 << 20;

// Largest dense block: one block always fits one chunk.
constexpr long long kMaxBlockSize = kMaxChunkBytes / sizeof(float);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_WIRE_LIMITS_H_
