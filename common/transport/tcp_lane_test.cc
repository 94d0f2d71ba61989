#include "common/transport/tcp_lane.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// A connected pair of TcpLaneSockets over loopback TCP.
struct Pair {
  std::unique_ptr<TcpLaneSocket> client;
  std::unique_ptr<TcpLaneSocket> server;
};

Pair Connected() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  Pair p;
  auto c = TcpLaneSocket::Connect("127.0.0.1", ntohs(a.sin_port),
                                  absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(c.ok()) << c.status();
  p.client = *std::move(c);
  p.server = std::make_unique<TcpLaneSocket>(accept(listener, nullptr, nullptr),
                                             "test");
  close(listener);
  return p;
}

TEST(TcpLaneSocketTest, MovesManyPartsBothWays) {
  Pair p = Connected();
  // More than a socket buffer, in parts of odd sizes, so that writes and
  // reads end mid-part.
  std::vector<char> a(3 << 20), b(777), c(5 << 20);
  std::iota(a.begin(), a.end(), 1);
  std::iota(b.begin(), b.end(), 7);
  std::iota(c.begin(), c.end(), 3);
  std::thread writer([&] {
    EXPECT_TRUE(
        p.client
            ->Write({IoVec(a.data(), a.size()), IoVec(b.data(), 0),
                     IoVec(b.data(), b.size()), IoVec(c.data(), c.size())},
                    absl::Now() + absl::Seconds(30))
            .ok());
  });
  std::vector<char> got(a.size() + b.size() + c.size());
  ASSERT_TRUE(p.server
                  ->Read({IoVec(got.data(), 1000),
                          IoVec(got.data() + 1000, got.size() - 1000)},
                         absl::Now() + absl::Seconds(30))
                  .ok());
  writer.join();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), got.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), got.begin() + a.size()));
  EXPECT_TRUE(
      std::equal(c.begin(), c.end(), got.begin() + a.size() + b.size()));
}

TEST(TcpLaneSocketTest, ReadEndsAtTheDeadlineAndWhenThePeerCloses) {
  Pair p = Connected();
  char buf[16];
  absl::Status s = p.server->Read({IoVec(buf, sizeof(buf))},
                                  absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  ASSERT_TRUE(p.client->Write({IoVec("abc", 3)}, absl::InfiniteFuture()).ok());
  p.client.reset();  // closes
  s = p.server->Read({IoVec(buf, sizeof(buf))}, absl::InfiniteFuture());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("connection closed"), std::string::npos) << s;
}

TEST(TcpLaneSocketTest, ShutdownWakesABlockedRead) {
  Pair p = Connected();
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    p.server->Shutdown();
  });
  char buf[16];
  absl::Status s =
      p.server->Read({IoVec(buf, sizeof(buf))}, absl::InfiniteFuture());
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(p.server->shut_down());
  EXPECT_FALSE(p.server->Write({IoVec("x", 1)}, absl::InfiniteFuture()).ok());
}

// Waits up to 5 s for `busy` to read `want`.
bool BusyReaches(const std::atomic<int>& busy, int want) {
  for (int i = 0; i < 5000 && busy.load() != want; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return busy.load() == want;
}

// The server reads `data` (deadline 30 s) while a thread runs `first`, then
// writes `data` from the client; what the server read.
std::string ReadWhileWriting(Pair& p, const std::function<void()>& first,
                             const std::string& data) {
  std::thread writer([&] {
    first();
    EXPECT_TRUE(
        p.client
            ->Write({IoVec(data.data(), data.size())}, absl::InfiniteFuture())
            .ok());
  });
  std::string buf(data.size(), '\0');
  EXPECT_TRUE(p.server
                  ->Read({IoVec(buf.data(), buf.size())},
                         absl::Now() + absl::Seconds(30))
                  .ok());
  writer.join();
  return buf;
}

TEST(TcpLaneSocketTest, AReadSpinsCountedWhileItsSideIsIdle) {
  Pair p = Connected();
  std::atomic<int> busy{0};
  p.server->set_spin(absl::Seconds(20), &busy, /*own=*/0);
  const absl::Time start = absl::Now();
  // The read waits spinning, and counts itself while it does.
  const std::string read = ReadWhileWriting(
      p, [&] { EXPECT_TRUE(BusyReaches(busy, 1)); }, "abcd");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(read, "abcd");
  EXPECT_EQ(busy.load(), 0);
}

TEST(TcpLaneSocketTest, AReadSpinsAlongsideOneOtherCall) {
  Pair p = Connected();
  // One call in progress besides this socket's own.
  std::atomic<int> busy{2};
  p.server->set_spin(absl::Seconds(20), &busy, /*own=*/1);
  EXPECT_EQ(ReadWhileWriting(
                p, [&] { EXPECT_TRUE(BusyReaches(busy, 3)); },  // spinning
                "ab"),
            "ab");
  EXPECT_EQ(busy.load(), 2);
}

TEST(TcpLaneSocketTest, AReadSleepsAtOnceWhileTwoOthersAreCounted) {
  Pair p = Connected();
  // Two calls in progress besides this socket's own (or one and a
  // spinner).
  std::atomic<int> busy{3};
  p.server->set_spin(absl::Seconds(20), &busy, /*own=*/1);
  const absl::Time start = absl::Now();
  EXPECT_EQ(ReadWhileWriting(
                p,
                [&] {
                  absl::SleepFor(absl::Milliseconds(100));
                  EXPECT_EQ(busy.load(), 3);  // not spinning
                },
                "ab"),
            "ab");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(busy.load(), 3);
}

TEST(TcpLaneSocketTest, ASpinEndsAtTheDeadline) {
  Pair p = Connected();
  std::atomic<int> busy{0};
  p.server->set_spin(absl::Seconds(20), &busy, 0);
  char buf[2];
  const absl::Time start = absl::Now();
  absl::Status s = p.server->Read({IoVec(buf, sizeof(buf))},
                                  absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(busy.load(), 0);
}

TEST(TcpLaneSocketTest, ConnectNamesTheAddressItCannotReach) {
  // A port nobody listens on: bind one, then close it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  const int port = ntohs(a.sin_port);
  auto c =
      TcpLaneSocket::Connect("127.0.0.1", port, absl::Now() + absl::Seconds(5));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find(absl::StrCat("127.0.0.1:", port)),
            std::string::npos)
      << c.status();
  auto bad = TcpLaneSocket::Connect("no-such-host.invalid", 1,
                                    absl::Now() + absl::Seconds(5));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
}

TEST(TcpLaneHostTest, TheHostOfEachTargetForm) {
  EXPECT_EQ(TcpLaneHost("127.0.0.1:7164"), "127.0.0.1");
  EXPECT_EQ(TcpLaneHost("pserver-0.ps:7164"), "pserver-0.ps");
  EXPECT_EQ(TcpLaneHost("dns:///pserver-0:7164"), "pserver-0");
  EXPECT_EQ(TcpLaneHost("ipv4:10.0.0.2:7164"), "10.0.0.2");
  EXPECT_EQ(TcpLaneHost("[::1]:7164"), "::1");
  EXPECT_EQ(TcpLaneHost("ipv6:[fe80::1]:7164"), "fe80::1");
  EXPECT_EQ(TcpLaneHost("unix:/tmp/ps.sock"), "");
  EXPECT_EQ(TcpLaneHost("dns://8.8.8.8/pserver:7164"), "");
  EXPECT_EQ(TcpLaneHost("[::1"), "");
}

TEST(BufferLaneTest, ChecksBoundsAndAlignmentAndReadsInPlace) {
  std::vector<float> buf(8, 0.0f);
  BufferLane lane(buf.data(), buf.size() * sizeof(float));
  EXPECT_TRUE(lane.Check(0, 8, "x").ok());
  EXPECT_TRUE(lane.Check(16, 4, "x").ok());
  EXPECT_EQ(lane.Check(16, 5, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lane.Check(2, 1, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lane.Check(36, 0, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lane.Check(0, -1, "x").code(), absl::StatusCode::kInvalidArgument);
  // An offset near 2^64 does not wrap around.
  EXPECT_EQ(lane.Check(~uint64_t{3}, 2, "x").code(),
            absl::StatusCode::kInvalidArgument);
  const float in[2] = {1.5f, -2.0f};
  lane.Write(8, absl::MakeConstSpan(in));
  EXPECT_EQ(buf[2], 1.5f);
  EXPECT_EQ(buf[3], -2.0f);
  float out[2];
  lane.Read(8, absl::MakeSpan(out));
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(lane.Stable(8, 2), buf.data() + 2);
}

}  // namespace
}  // namespace shardps
