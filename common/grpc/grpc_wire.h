#ifndef SHARDPS_COMMON_GRPC_GRPC_WIRE_H_
#define SHARDPS_COMMON_GRPC_GRPC_WIRE_H_

// Protobuf messages to and from grpc::ByteBuffer without copying large
// values: the zero-copy half of the gRPC bindings (docs/wire_protocol.md,
// "Zero copy"). What goes on the wire is the messages' ordinary protobuf
// encoding, byte for byte, so any gRPC client or server still reads it.

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/transport/dense_push.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// String and bytes fields shorter than this are copied into the buffer;
// longer ones are referenced. Below a few KiB a slice costs more than the
// copy.
inline constexpr size_t kMinAliasedBytes = 4096;

// Serializes `msg` into a ByteBuffer in which every string or bytes field of
// kMinAliasedBytes or more is a slice pointing into `msg` itself: `owner`
// (which must keep `msg` alive and unchanged) is held by those slices until
// gRPC has sent them and releases them. With a null owner the caller keeps
// `msg` until the call that sends the buffer has finished.
grpc::ByteBuffer SerializeAliasing(const google::protobuf::MessageLite& msg,
                                   std::shared_ptr<const void> owner);

// The exact bytes of ToPushRequest(push).SerializeAsString(), as a
// ByteBuffer whose value slices point at the blocks' bytes: nothing is
// copied but the headers. Those bytes must stay unchanged until the call
// that sends the buffer has finished.
grpc::ByteBuffer SerializeDensePush(const DensePush& push);

// Parses `buffer` into `msg` (reading its slices in place);
// INVALID_ARGUMENT when it is not a valid encoding of that message.
absl::Status ParseByteBuffer(const grpc::ByteBuffer& buffer,
                             google::protobuf::MessageLite* msg);

// The bytes of `buffer`, copied (tests).
std::string ByteBufferToString(const grpc::ByteBuffer& buffer);

// Floats views of little-endian float32 bytes need a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire's float32 values are little-endian");

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_GRPC_WIRE_H_
