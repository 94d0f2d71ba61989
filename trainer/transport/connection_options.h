#ifndef SHARDPS_TRAINER_TRANSPORT_CONNECTION_OPTIONS_H_
#define SHARDPS_TRAINER_TRANSPORT_CONNECTION_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/transport/transport_security.h"

namespace shardps {

// How a trainer reaches the pservers (--pservers, --rpc_retry_s,
// --heartbeat_interval_s, --auth_token_file and --tls_*, --job_id).
struct ConnectionOptions {
  std::vector<std::string> addresses;  // host:port, --pservers order
  absl::Duration rpc_retry;            // --rpc_retry_s
  absl::Duration heartbeat_interval;   // zero: no heartbeats
  TransportSecurity security;          // --auth_token_file, --tls_*
  std::string job_id;                  // --job_id
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_CONNECTION_OPTIONS_H_
