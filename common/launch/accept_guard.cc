#include "common/launch/accept_guard.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

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

}  // namespace

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
      if (fd <= cap) return fd;
      Shed(fd, "the open-file limit is nearly reached");
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
