#ifndef SHARDPS_BENCHMARKS_GRPC_BASELINE_H_
#define SHARDPS_BENCHMARKS_GRPC_BASELINE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardps {

// The plain gRPC baseline of push_pull_benchmark: a server in this process
// whose ParameterServer service answers a push with OK, unread, and a pull
// with one DenseBlock holding a payload allocated once (copied into each
// reply, as any server that keeps its values must), and a synchronous client
// whose request and reply are reused across calls, so that the figure is
// gRPC and protobuf alone. Requires external synchronization.
class PlainGrpc {
 public:
  static absl::StatusOr<std::unique_ptr<PlainGrpc>> Start(
      int64_t payload_bytes);
  ~PlainGrpc();

  int64_t payload_bytes() const;
  // One unary call each; the pull checks the size of the reply.
  absl::Status Push();
  absl::Status Pull();
  // Serialized sizes of a push request and of a pull reply.
  int64_t push_wire_bytes() const;
  int64_t pull_wire_bytes() const;

 private:
  struct State;
  explicit PlainGrpc(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace shardps

#endif  // SHARDPS_BENCHMARKS_GRPC_BASELINE_H_
