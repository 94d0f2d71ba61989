#ifndef SHARDPS_COMMON_LAUNCH_PORT_FILE_H_
#define SHARDPS_COMMON_LAUNCH_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardps {

// Writes `port` and a newline to `path` through a temporary file and a
// rename, so a reader never sees a partial number. PERMISSION_DENIED naming
// `flag` (e.g. "--port_file") and the path when either step fails.
absl::Status WritePortFile(const std::string& path, int port,
                           absl::string_view flag);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_PORT_FILE_H_
