#include "common/launch/accept_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

// A listening socket on 127.0.0.1 and clients that connect to it.
class AcceptGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listen_fd_, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(listen(listen_fd_, 64), 0);
    socklen_t len = sizeof(a);
    ASSERT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len),
              0);
    port_ = ntohs(a.sin_port);
  }
  void TearDown() override {
    SetConnectionsPerAddress(0);
    for (int fd : fds_) ConnectionClosed(fd);
    DisableAcceptGuard();
    for (int fd : fds_) close(fd);
    close(listen_fd_);
  }
  // From `from` (a loopback address: the whole of 127/8 is this host's).
  int Connect(const char* from = nullptr) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (from != nullptr) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      inet_pton(AF_INET, from, &src.sin_addr);
      EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)), 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port_);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    fds_.push_back(fd);
    return fd;
  }
  // Whether the server closed `fd` within a second: a read sees the end
  // or a reset.
  static bool ClosedByServer(int fd) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return false;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  int Accept() {
    const int fd =
        GuardedAccept4(&accept4, listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }
  void NonBlocking() {
    fcntl(listen_fd_, F_SETFL, fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<int> fds_;
};

TEST_F(AcceptGuardTest, OffItIsTheSystemsAccept) {
  Connect();
  EXPECT_GE(Accept(), 0);
}

TEST_F(AcceptGuardTest, ConnectionsPastTheCapAreClosedAndTheBacklogDrained) {
  NonBlocking();
  std::vector<int> clients;
  for (int i = 0; i < 6; ++i) clients.push_back(Connect());
  rlimit l;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &l), 0);
  ASSERT_GT(EnableAcceptGuard(64), 0);  // opens its spare descriptor
  // The cap at the lowest free descriptor: one connection fits.
  const int probe = dup(0);
  ASSERT_GE(probe, 0);
  close(probe);
  const int cap = EnableAcceptGuard(static_cast<int>(l.rlim_cur) - probe);
  ASSERT_EQ(cap, probe);
  const int64_t shed = ConnectionsShed();
  int kept = 0;
  for (;;) {
    const int fd = Accept();
    if (fd < 0) {
      EXPECT_EQ(errno, EAGAIN);
      break;
    }
    EXPECT_LE(fd, cap);
    ++kept;
  }
  EXPECT_GE(kept, 1);
  EXPECT_LT(kept, 6);
  EXPECT_EQ(ConnectionsShed() - shed, 6 - kept);
  int closed = 0;
  for (int fd : clients) closed += ClosedByServer(fd) ? 1 : 0;
  EXPECT_EQ(closed, 6 - kept);
}

TEST_F(AcceptGuardTest, OneAddressHoldsAtMostItsCap) {
  NonBlocking();
  ASSERT_GT(EnableAcceptGuard(64), 0);
  SetConnectionsPerAddress(2);
  std::vector<int> flood;
  for (int i = 0; i < 4; ++i) flood.push_back(Connect("127.0.0.2"));
  const int64_t shed = ConnectionsShed();
  std::vector<int> kept;
  for (int fd; (fd = Accept()) >= 0;) kept.push_back(fd);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(ConnectionsShed() - shed, 2);
  EXPECT_EQ(ConnectionsFromAddressOf(kept[0]), 2);
  EXPECT_TRUE(ClosedByServer(flood[2]));
  EXPECT_TRUE(ClosedByServer(flood[3]));
  // Another address is not held back by the first's.
  Connect("127.0.0.3");
  const int other = Accept();
  ASSERT_GE(other, 0);
  EXPECT_EQ(ConnectionsFromAddressOf(other), 1);
  // One of the first address's closed: room for one more of it.
  ConnectionClosed(kept[0]);
  close(kept[0]);
  fds_.erase(std::find(fds_.begin(), fds_.end(), kept[0]));
  Connect("127.0.0.2");
  const int again = Accept();
  ASSERT_GE(again, 0);
  EXPECT_EQ(ConnectionsFromAddressOf(again), 2);
  Connect("127.0.0.2");
  EXPECT_LT(Accept(), 0);
}

TEST_F(AcceptGuardTest, EmfileTakesTheConnectionOffTheBacklog) {
  NonBlocking();
  ASSERT_GE(EnableAcceptGuard(1), 0);  // the cap is far; EMFILE comes first
  const int client = Connect();
  // A system accept4 out of descriptors, as under a flood; the guard frees
  // its spare to take the connection off the backlog.
  static int calls = 0;
  calls = 0;
  auto emfile_once = [](int fd, sockaddr* a, socklen_t* l, int f) {
    if (calls++ == 0) {
      errno = EMFILE;
      return -1;
    }
    return accept4(fd, a, l, f);
  };
  const int64_t shed = ConnectionsShed();
  const int fd =
      GuardedAccept4(emfile_once, listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(errno, EAGAIN);  // never EMFILE: gRPC would stop listening
  EXPECT_EQ(ConnectionsShed() - shed, 1);
  EXPECT_TRUE(ClosedByServer(client));
  // The spare is back: the next connection is served.
  Connect();
  EXPECT_GE(Accept(), 0);
}

TEST_F(AcceptGuardTest, ABlockingListenerGetsEagainAfterEachShed) {
  const int probe = dup(0);
  close(probe);
  rlimit l;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &l), 0);
  // No connection fits.
  ASSERT_GT(EnableAcceptGuard(static_cast<int>(l.rlim_cur) - probe + 1), 0);
  const int client = Connect();
  Connect();
  // Returns at once rather than block for a third connection.
  EXPECT_EQ(Accept(), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_TRUE(ClosedByServer(client));
}

}  // namespace
}  // namespace shardps
