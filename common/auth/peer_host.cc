#include "common/auth/peer_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace shardps {
namespace {

// An address in the form both families compare in: IPv4 as IPv4-mapped
// IPv6 (::ffff:a.b.c.d).
struct Address {
  in6_addr v6;
};

bool Parse(absl::string_view peer, Address* out) {
  if (absl::ConsumePrefix(&peer, "ipv4:")) {
    const size_t colon = peer.rfind(':');
    if (colon == absl::string_view::npos) return false;
    const std::string host(peer.substr(0, colon));
    in_addr v4;
    if (inet_pton(AF_INET, host.c_str(), &v4) != 1) return false;
    std::memset(&out->v6, 0, sizeof(out->v6));
    out->v6.s6_addr[10] = 0xff;
    out->v6.s6_addr[11] = 0xff;
    std::memcpy(&out->v6.s6_addr[12], &v4, sizeof(v4));
    return true;
  }
  if (absl::ConsumePrefix(&peer, "ipv6:[")) {
    const size_t close = peer.find(']');
    if (close == absl::string_view::npos) return false;
    absl::string_view host = peer.substr(0, close);
    // A scope ("fe80::1%eth0", "%25" in URIs) does not change the address.
    const size_t scope = host.find('%');
    if (scope != absl::string_view::npos) host = host.substr(0, scope);
    return inet_pton(AF_INET6, std::string(host).c_str(), &out->v6) == 1;
  }
  return false;
}

bool IsV4Mapped(const in6_addr& a) {
  static constexpr unsigned char kPrefix[12] = {0, 0, 0, 0, 0,    0,
                                                0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(a.s6_addr, kPrefix, sizeof(kPrefix)) == 0;
}

bool IsLoopback(const in6_addr& a) {
  if (IsV4Mapped(a)) return a.s6_addr[12] == 127;  // 127.0.0.0/8
  static const in6_addr kLoopback = IN6ADDR_LOOPBACK_INIT;
  return std::memcmp(&a, &kLoopback, sizeof(a)) == 0;
}

bool IsInterfaceAddress(const in6_addr& a) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (i->ifa_addr->sa_family == AF_INET && IsV4Mapped(a)) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      found = std::memcmp(&v4->sin_addr, &a.s6_addr[12], 4) == 0;
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      found = std::memcmp(&v6->sin6_addr, &a, sizeof(a)) == 0;
    }
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

bool PeerIsOnThisHost(absl::string_view grpc_peer) {
  if (absl::StartsWith(grpc_peer, "unix:") ||
      absl::StartsWith(grpc_peer, "unix-abstract:")) {
    return true;
  }
  Address a;
  if (!Parse(grpc_peer, &a)) return false;
  return IsLoopback(a.v6) || IsInterfaceAddress(a.v6);
}

}  // namespace shardps
