// PeerIsOnThisHost over gRPC's peer strings: loopback, Unix sockets, this
// host's own interface addresses, and what is not this host or not parsed.
#include "common/auth/peer_host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <string>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(PeerHostTest, LoopbackAndUnixSocketsAreThisHost) {
  EXPECT_TRUE(PeerIsOnThisHost("ipv4:127.0.0.1:41234"));
  EXPECT_TRUE(PeerIsOnThisHost("ipv4:127.8.9.10:1"));
  EXPECT_TRUE(PeerIsOnThisHost("ipv6:[::1]:41234"));
  EXPECT_TRUE(PeerIsOnThisHost("ipv6:[::ffff:127.0.0.1]:41234"));
  EXPECT_TRUE(PeerIsOnThisHost("unix:/run/shardps.sock"));
  EXPECT_TRUE(PeerIsOnThisHost("unix-abstract:shardps"));
}

TEST(PeerHostTest, OtherHostsAndWhatCannotBeParsedAreNot) {
  // TEST-NET addresses (RFC 5737, 3849) belong to no real interface.
  EXPECT_FALSE(PeerIsOnThisHost("ipv4:192.0.2.7:41234"));
  EXPECT_FALSE(PeerIsOnThisHost("ipv6:[2001:db8::7]:41234"));
  EXPECT_FALSE(PeerIsOnThisHost("ipv6:[::ffff:192.0.2.7]:41234"));
  for (const char* bad : {"", "ipv4:", "ipv4:127.0.0.1", "ipv4:localhost:1",
                          "ipv6:::1:1", "ipv6:[::1", "ipv6:[not an address]:1",
                          "dns:127.0.0.1:1", "127.0.0.1:1"}) {
    EXPECT_FALSE(PeerIsOnThisHost(bad)) << bad;
  }
}

TEST(PeerHostTest, ThisHostsInterfaceAddressesAreThisHost) {
  ifaddrs* list = nullptr;
  ASSERT_EQ(getifaddrs(&list), 0);
  int checked = 0;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN];
    std::string peer;
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr,
                text, sizeof(text));
      peer = std::string("ipv4:") + text + ":5000";
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6,
                &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, text,
                sizeof(text));
      peer = std::string("ipv6:[") + text + "%" + i->ifa_name + "]:5000";
    } else {
      continue;
    }
    EXPECT_TRUE(PeerIsOnThisHost(peer)) << peer;
    ++checked;
  }
  freeifaddrs(list);
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace shardps
