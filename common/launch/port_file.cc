#include "common/launch/port_file.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::Status WritePortFile(const std::string& path, int port,
                           absl::string_view flag) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    f.flush();
    if (!f) {
      return absl::PermissionDeniedError(
          absl::StrCat(flag, ": cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(flag, ": cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace shardps
