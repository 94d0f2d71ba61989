#ifndef SHARDPS_COMMON_LAUNCH_ADDRESS_H_
#define SHARDPS_COMMON_LAUNCH_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace shardps {

// The default pserver port (docs/design.md, "Command line and environment").
inline constexpr int kDefaultPort = 7164;

// "host" or "host:port" (a bracketed IPv6 host with or without a port) as
// "host:port", the port 7164 when none is given. INVALID_ARGUMENT for an
// empty address, an empty or unbracketed IPv6 host, or a port outside
// [1, 65535].
absl::StatusOr<std::string> NormalizeAddress(const std::string& addr);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_ADDRESS_H_
