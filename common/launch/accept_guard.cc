#include "common/launch/accept_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"

namespace shardps {
namespace {

std::atomic<int> g_cap{-1};    // the highest descriptor kept; -1: off
std::atomic<int> g_spare{-1};  // a descriptor freed to accept on EMFILE
std::atomic<int64_t> g_shed{0};
std::atomic<int64_t> g_last_log_ns{0};

int OpenSpare() { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

// Counts a connection shed, and says so at most every 10 s.
void Shed(int fd, const char* why) {
  close(fd);
  const int64_t n = g_shed.fetch_add(1, std::memory_order_relaxed) + 1;
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = g_last_log_ns.load(std::memory_order_relaxed);
  if (now - last >= absl::ToInt64Nanoseconds(absl::Seconds(10)) &&
      g_last_log_ns.compare_exchange_strong(last, now)) {
    LOG(WARNING) << "connection closed as soon as accepted: " << why << " ("
                 << n << " so far; connections that send nothing are closed "
                 << "after the handshake timeout)";
  }
}

// Connections per address: g_slot[fd] is the address hash of connection
// fd (0: not counted), g_count the connections open per hash. The slots
// are allocated once, for the highest descriptor the guard lets through,
// and never freed (close() reads them from any thread).
std::atomic<int> g_per_address{0};  // 0: no cap
std::atomic<std::atomic<uint64_t>*> g_slot{nullptr};
std::atomic<int> g_slots{0};
absl::Mutex g_count_mu;
absl::flat_hash_map<uint64_t, int>& Counts() {
  static auto* counts = new absl::flat_hash_map<uint64_t, int>;
  return *counts;
}

void AllocateSlots(int cap) {
  if (cap < 0 || g_slots.load() > cap) return;
  // Leaked when replaced (a larger cap set again, in tests): a close() on
  // another thread may still read the old ones.
  auto* slots = new std::atomic<uint64_t>[cap + 1]();
  g_slot.store(slots);
  g_slots.store(cap + 1);
}

// The peer's IP address of connection `fd`, hashed (never 0); 0 when it
// has none (a Unix socket).
uint64_t AddressHash(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  absl::string_view ip;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ip = absl::string_view(reinterpret_cast<const char*>(&v4->sin_addr), 4);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    const char* b = reinterpret_cast<const char*>(&v6->sin6_addr);
    // An IPv4 address mapped into IPv6 is the IPv4 address.
    ip = IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) ? absl::string_view(b + 12, 4)
                                              : absl::string_view(b, 16);
  } else {
    return 0;
  }
  const uint64_t h = absl::HashOf(ip);
  return h == 0 ? 1 : h;
}

// Counts connection `fd` against its address; false when the address has
// its cap already (nothing counted).
bool CountConnection(int fd) {
  const int max = g_per_address.load(std::memory_order_relaxed);
  std::atomic<uint64_t>* slots = g_slot.load();
  if (max <= 0 || slots == nullptr || fd >= g_slots.load()) return true;
  const uint64_t h = AddressHash(fd);
  if (h == 0) return true;
  absl::MutexLock l(&g_count_mu);
  int& n = Counts()[h];
  if (n >= max) return false;
  ++n;
  slots[fd].store(h);
  return true;
}

}  // namespace

void SetConnectionsPerAddress(int max) { g_per_address.store(max); }

void ConnectionClosed(int fd) {
  std::atomic<uint64_t>* slots = g_slot.load(std::memory_order_acquire);
  if (slots == nullptr || fd < 0 || fd >= g_slots.load()) return;
  const uint64_t h = slots[fd].exchange(0);
  if (h == 0) return;
  absl::MutexLock l(&g_count_mu);
  auto it = Counts().find(h);
  if (it != Counts().end() && --it->second <= 0) Counts().erase(it);
}

int ConnectionsFromAddressOf(int fd) {
  const uint64_t h = AddressHash(fd);
  absl::MutexLock l(&g_count_mu);
  auto it = Counts().find(h);
  return it == Counts().end() ? 0 : it->second;
}

int EnableAcceptGuard(int reserve) {
  rlimit l;
  if (getrlimit(RLIMIT_NOFILE, &l) != 0) return -1;
  const rlim_t soft = l.rlim_cur == RLIM_INFINITY ? (1 << 30) : l.rlim_cur;
  const int cap = static_cast<int>(
      soft > static_cast<rlim_t>(reserve) ? soft - reserve : soft / 2);
  if (g_spare.load() < 0) {
    const int spare = OpenSpare();
    int expected = -1;
    if (spare >= 0 && !g_spare.compare_exchange_strong(expected, spare)) {
      close(spare);
    }
  }
  AllocateSlots(cap);
  g_cap.store(cap);
  return cap;
}

void DisableAcceptGuard() {
  g_cap.store(-1);
  const int spare = g_spare.exchange(-1);
  if (spare >= 0) close(spare);
}

int64_t ConnectionsShed() { return g_shed.load(std::memory_order_relaxed); }

int GuardedAccept4(Accept4Function real, int listen_fd, sockaddr* addr,
                   socklen_t* addr_len, int flags) {
  const int cap = g_cap.load(std::memory_order_relaxed);
  if (cap < 0) return real(listen_fd, addr, addr_len, flags);
  const int listen_flags = fcntl(listen_fd, F_GETFL);
  const bool blocking = listen_flags >= 0 && (listen_flags & O_NONBLOCK) == 0;
  for (;;) {
    const int fd = real(listen_fd, addr, addr_len, flags);
    if (fd >= 0) {
      if (fd > cap) {
        Shed(fd, "the open-file limit is nearly reached");
      } else if (!CountConnection(fd)) {
        Shed(fd, "its address has --max_connections_per_ip open");
      } else {
        return fd;
      }
    } else if (errno == EMFILE || errno == ENFILE) {
      // Room for one descriptor: take the connection off the backlog and
      // close it, or the listener would be told of it again and again.
      const int spare = g_spare.exchange(-1);
      if (spare < 0) {
        errno = EAGAIN;  // another thread is shedding: try again later
        return -1;
      }
      close(spare);
      const int shed = real(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (shed >= 0) Shed(shed, "the open-file limit is reached");
      const int again = OpenSpare();
      if (again >= 0) {
        int expected = -1;
        if (!g_spare.compare_exchange_strong(expected, again)) close(again);
      }
      if (shed < 0) {
        errno = EAGAIN;
        return -1;
      }
    } else {
      return -1;  // EAGAIN, EINTR, ...: the caller's to handle
    }
    if (blocking) {
      // A blocking listener would wait here for the next connection, out
      // of its owner's reach (a shutdown it polls for).
      errno = EAGAIN;
      return -1;
    }
  }
}

}  // namespace shardps
