#include "common/launch/address.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<std::string> NormalizeAddress(const std::string& addr) {
  if (addr.empty()) {
    return absl::InvalidArgumentError("empty pserver address");
  }
  std::string host = addr;
  std::string port = std::to_string(kDefaultPort);
  const size_t colon = addr.rfind(':');
  const bool bracketed_v6 = absl::StartsWith(addr, "[");
  if (colon != std::string::npos && (!bracketed_v6 || addr.find(']') < colon)) {
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }
  int p = 0;
  const bool bad_host =
      host.empty() || (!bracketed_v6 && host.find(':') != std::string::npos);
  if (bad_host || !absl::SimpleAtoi(port, &p) || p <= 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad pserver address '", addr, "': expected host or host:port with a ",
        "port in [1, 65535]"));
  }
  return absl::StrCat(host, ":", p);
}

}  // namespace shardps
