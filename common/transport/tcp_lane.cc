#include "common/transport/tcp_lane.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

// Milliseconds to `deadline` for poll: -1 for none, at least 1 before it.
int PollMillis(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1,
      INT_MAX));
}

void SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Connects `fd` (non-blocking) to `addr` by `deadline`.
absl::Status ConnectOne(int fd, const addrinfo& addr, absl::Time deadline) {
  if (connect(fd, addr.ai_addr, addr.ai_addrlen) == 0) return absl::OkStatus();
  if (errno != EINPROGRESS) {
    return absl::UnavailableError(std::strerror(errno));
  }
  pollfd p{fd, POLLOUT, 0};
  const int n = poll(&p, 1, PollMillis(deadline));
  if (n == 0) return absl::DeadlineExceededError("connect timed out");
  if (n < 0) return absl::UnavailableError(std::strerror(errno));
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return absl::UnavailableError(std::strerror(err));
  return absl::OkStatus();
}

// One sendmsg (`write`) or readv on `fd` of `parts` from `first` on (at
// most IOV_MAX of them); what it returned, errno set as it left it.
ssize_t SendOrReceive(int fd, std::vector<iovec>& parts, size_t first,
                      bool write) {
  const int count =
      static_cast<int>(std::min<size_t>(parts.size() - first, IOV_MAX));
  ssize_t n;
  if (write) {
    msghdr m{};
    m.msg_iov = &parts[first];
    m.msg_iovlen = count;
    n = sendmsg(fd, &m, MSG_NOSIGNAL);
  } else {
    n = readv(fd, &parts[first], count);
  }
  return n;
}

// Advances `parts` from *first on past the `n` bytes just moved, and
// *first past the parts now done.
void MarkDone(std::vector<iovec>& parts, size_t n, size_t* first) {
  size_t left = n;
  while (left > 0) {
    iovec& v = parts[*first];
    const size_t take = std::min(left, v.iov_len);
    v.iov_base = static_cast<char*>(v.iov_base) + take;
    v.iov_len -= take;
    left -= take;
    if (v.iov_len == 0) ++*first;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpLaneSocket>> TcpLaneSocket::Connect(
    const std::string& host, int port, absl::Time deadline) {
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("TCP lane to ", where, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = absl::UnavailableError(std::strerror(errno));
      continue;
    }
    SetNonBlocking(fd);
    last = ConnectOne(fd, *a, deadline);
    if (last.ok()) {
      freeaddrinfo(found);
      SetNoDelay(fd);
      return std::make_unique<TcpLaneSocket>(fd, where);
    }
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("TCP lane to ", where, ": ", last.message()));
}

TcpLaneSocket::TcpLaneSocket(int fd, std::string peer)
    : fd_(fd), peer_(std::move(peer)) {
  SetNonBlocking(fd_);
  SetNoDelay(fd_);
}

TcpLaneSocket::~TcpLaneSocket() { close(fd_); }

void TcpLaneSocket::Shutdown() {
  shut_down_.store(true);
  shutdown(fd_, SHUT_RDWR);
}

absl::Status TcpLaneSocket::Transfer(std::vector<iovec>& parts,
                                     absl::Time deadline, bool write) {
  size_t first = 0;
  // Whether this wait has spun already.
  bool spun = false;
  while (first < parts.size()) {
    if (parts[first].iov_len == 0) {
      ++first;
      continue;
    }
    if (shut_down_.load()) {
      return absl::UnavailableError(
          absl::StrCat("TCP lane to ", peer_, ": shut down"));
    }
    const ssize_t n = SendOrReceive(fd_, parts, first, write);
    if (n > 0) {
      spun = false;
      MarkDone(parts, static_cast<size_t>(n), &first);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("TCP lane to ", peer_, ": connection closed"));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(
          absl::StrCat("TCP lane to ", peer_, ": ", std::strerror(errno)));
    }
    pollfd p{fd_, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    if (!spun) {
      spun = true;
      if (Spin(p, deadline)) continue;
    }
    const int ready = poll(&p, 1, PollMillis(deadline));
    if (ready == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "TCP lane to ", peer_, ": no progress before the deadline"));
    }
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("TCP lane to ", peer_, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

bool TcpLaneSocket::Spin(pollfd& p, absl::Time deadline) {
  if (spin_ <= absl::ZeroDuration()) return false;
  if (busy_ != nullptr &&
      busy_->fetch_add(1) >
          own_.load(std::memory_order_relaxed) + tcp_lane::kSpinAlongside) {
    busy_->fetch_sub(1);
    return false;
  }
  const absl::Time until = std::min(absl::Now() + spin_, deadline);
  bool ready = false;
  do {
    // poll, not the read itself: it leaves the socket's lock to the sender
    // delivering into it. Ready, or an error the read will name.
    if (poll(&p, 1, 0) != 0) {
      ready = true;
      break;
    }
    // The thread that will send what this one waits for may be waiting
    // for this core (a trainer and a pserver on one host, or more threads
    // than cores): the scheduler may let it run.
    sched_yield();
  } while (absl::Now() < until);
  if (busy_ != nullptr) busy_->fetch_sub(1);
  return ready;
}

absl::Status TcpLaneSocket::Write(std::vector<iovec> parts,
                                  absl::Time deadline) {
  return Transfer(parts, deadline, /*write=*/true);
}

absl::Status TcpLaneSocket::Read(std::vector<iovec> parts,
                                 absl::Time deadline) {
  return Transfer(parts, deadline, /*write=*/false);
}

absl::Status TcpLaneSocket::Skip(uint64_t bytes, absl::Time deadline) {
  char scratch[65536];
  while (bytes > 0) {
    const size_t n = std::min<uint64_t>(bytes, sizeof(scratch));
    if (absl::Status s = Read({IoVec(scratch, n)}, deadline); !s.ok()) {
      return s;
    }
    bytes -= n;
  }
  return absl::OkStatus();
}

std::string TcpLaneHost(absl::string_view target) {
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) {
      target.remove_prefix(scheme.size());
      break;
    }
  }
  if (absl::StrContains(target, "/") || absl::StartsWith(target, "unix:")) {
    return "";
  }
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find(']');
    if (close == absl::string_view::npos) return "";
    return std::string(target.substr(1, close - 1));
  }
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos) return std::string(target);
  int port = 0;
  if (!absl::SimpleAtoi(target.substr(colon + 1), &port)) return "";
  return std::string(target.substr(0, colon));
}

absl::Status BufferLane::Check(uint64_t offset, int64_t floats,
                               const char* what) const {
  const uint64_t bytes = static_cast<uint64_t>(floats) * sizeof(float);
  if (floats < 0 || offset % sizeof(float) != 0 || offset > bytes_ ||
      bytes > bytes_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", floats, " floats at byte ", offset,
                     " do not fit the call's ", bytes_, " bytes of values"));
  }
  return absl::OkStatus();
}

void BufferLane::Write(uint64_t offset, absl::Span<const float> values) const {
  std::memcpy(data_ + offset / sizeof(float), values.data(),
              values.size() * sizeof(float));
}

void BufferLane::Read(uint64_t offset, absl::Span<float> to) const {
  std::memcpy(to.data(), data_ + offset / sizeof(float),
              to.size() * sizeof(float));
}

const float* BufferLane::Stable(uint64_t offset, int64_t /*floats*/) const {
  return data_ + offset / sizeof(float);
}

}  // namespace shardps
