#include "common/grpc/grpc_keepalive.h"

#include <algorithm>

namespace shardps {

void AddKeepaliveArgs(absl::Duration timeout, grpc::ChannelArguments* args) {
  const int ms = static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 500, 600000));
  args->SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args->SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ms);
  args->SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args->SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

void AllowKeepalivePings(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

}  // namespace shardps
