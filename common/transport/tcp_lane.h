#ifndef SHARDPS_COMMON_TRANSPORT_TCP_LANE_H_
#define SHARDPS_COMMON_TRANSPORT_TCP_LANE_H_

#include <poll.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/transport/dense_value_lane.h"
#include "common/transport/wire_limits.h"

namespace shardps {

// The TCP lane (docs/wire_protocol.md, "TCP lane"): a trainer's float32
// dense pushes and pulls over TCP connections of their own, beside gRPC,
// which keeps every other call. A call is a fixed header, the ordinary
// PushRequest or PullRequest (its blocks' values empty, their
// shared_offset giving where each lies in the values), then the values; the
// reply is a header, the status message, the PushResponse or PullResponse,
// then a pull's values. Values are read from the socket straight into the
// trainer's parameters and written from its gradients: no protobuf copy,
// no HTTP/2 framing, no gRPC threads. A connection first presents the
// ticket OpenTcpLane gave over gRPC (with the token and the job's checks);
// the pserver answers it with a reply header. All integers little-endian.
namespace tcp_lane {

inline constexpr uint32_t kMagic = 0x314c5053;  // "SPL1"
inline constexpr size_t kTicketBytes = 16;
// Bounds of a call the pserver accepts; a larger transfer is several calls
// (the trainer cuts them at kMaxChunkBytes of values anyway).
inline constexpr uint32_t kMaxRequestBytes = 1 << 20;
inline constexpr uint64_t kMaxValueBytes = kMaxChunkBytes;
inline constexpr uint32_t kMaxMessageBytes = 4096;
// The trainer cuts a pserver's transfers over the lane into calls of at
// most this many bytes of values (a larger block gets a call of its own),
// so that one connection's call is received while another's is applied:
// 2.5 to 3 times the throughput of 4 MiB calls for a 4 MiB push here
// (docs/performance.md, "TCP lane").
inline constexpr size_t kChunkBytes = 512 << 10;

// How long a lane socket that would wait polls without sleeping before it
// sleeps (TcpLaneSocket::set_spin; trainer and pserver --tcp_lane_spin_us).
inline constexpr absl::Duration kDefaultSpin = absl::Microseconds(50);

// How many calls or spinning sockets besides its own a socket may spin
// alongside (TcpLaneSocket::set_spin): one, as two calls in progress keep
// two cores busy and a spinner yields its core between polls.
inline constexpr int kSpinAlongside = 1;

enum Method : uint32_t { kPush = 1, kPull = 2 };

// What a connection sends first.
struct Hello {
  uint32_t magic = kMagic;
  uint32_t reserved = 0;
  uint8_t ticket[kTicketBytes] = {};
};
static_assert(sizeof(Hello) == 24);

// A call: `request_bytes` of request, then (a push) `value_bytes` of
// values; a pull's `value_bytes` is the size of the values its reply
// carries, at the offsets its blocks name.
struct CallHeader {
  uint32_t method = 0;
  uint32_t request_bytes = 0;
  uint64_t value_bytes = 0;
};
static_assert(sizeof(CallHeader) == 16);

// The answer to a Hello (no reply, no values) and to a call:
// `message_bytes` of status message, `reply_bytes` of reply, then
// `value_bytes` of values (a pull answered OK).
struct ReplyHeader {
  uint32_t code = 0;  // absl::StatusCode
  uint32_t message_bytes = 0;
  uint32_t reply_bytes = 0;
  uint32_t reserved = 0;
  uint64_t value_bytes = 0;
};
static_assert(sizeof(ReplyHeader) == 24);

}  // namespace tcp_lane

// A connected TCP socket whose reads and writes end by a deadline; closed
// on destruction. Shutdown (from any thread) wakes a blocked Read or Write,
// which then fails. One reader and one writer at a time.
//
// A Read or Write that would wait first polls for up to spin() without
// sleeping (kDefaultSpin unless set_spin says otherwise), then sleeps in
// poll: the answer to a lane call comes tens of microseconds after its
// request, the room to write the rest of one as soon as the peer reads,
// and waking a sleeping thread costs about as much again on virtual
// machines (a halted vCPU woken by an inter-processor interrupt). A
// spinning thread yields its core between polls, to the thread it may be
// waiting for. Among the sockets that share a count (set_spin), one spins
// only while at most one other call or spinner is counted
// (kSpinAlongside): with more, the cores have their work to do, and
// spinning made 1 to 16 MiB transfers slower (docs/performance.md, "TCP
// lane"). Each wait burns at most spin() of a core.
class TcpLaneSocket {
 public:
  // Connects to host:port (a name or an address) by `deadline`, with
  // TCP_NODELAY. UNAVAILABLE naming the address when it cannot.
  static absl::StatusOr<std::unique_ptr<TcpLaneSocket>> Connect(
      const std::string& host, int port, absl::Time deadline);
  // Takes a connected socket (made non-blocking here). `peer` names it in
  // messages.
  TcpLaneSocket(int fd, std::string peer);
  ~TcpLaneSocket();
  TcpLaneSocket(const TcpLaneSocket&) = delete;
  TcpLaneSocket& operator=(const TcpLaneSocket&) = delete;

  // Writes every byte `parts` names, in order (`parts` is consumed).
  // UNAVAILABLE when the peer closed or reset the connection, or after
  // Shutdown; DEADLINE_EXCEEDED past `deadline`.
  absl::Status Write(std::vector<iovec> parts, absl::Time deadline);
  // Fills every byte `parts` names, in order, as Write.
  absl::Status Read(std::vector<iovec> parts, absl::Time deadline);
  // Reads and drops `bytes`.
  absl::Status Skip(uint64_t bytes, absl::Time deadline);
  // Ends the connection both ways; later and blocked calls fail.
  void Shutdown();
  // How long a Read or Write polls before it sleeps (zero: it sleeps at
  // once). `busy` (null: none; it must outlive the socket) counts the lane
  // calls in progress on this side and the sockets spinning; the socket
  // spins only while that count is at most `own` (its own call, when the
  // count includes it) plus kSpinAlongside. Set before the socket is used.
  void set_spin(absl::Duration spin, std::atomic<int>* busy = nullptr,
                int own = 0) {
    spin_ = spin;
    busy_ = busy;
    own_.store(own, std::memory_order_relaxed);
  }
  // What the socket's own call adds to `busy` now: 1 from the moment its
  // call is counted there, 0 once it is not. Only by the thread that
  // reads and writes the socket.
  void set_own(int own) { own_.store(own, std::memory_order_relaxed); }
  absl::Duration spin() const { return spin_; }
  bool shut_down() const { return shut_down_.load(); }
  const std::string& peer() const { return peer_; }

 private:
  absl::Status Transfer(std::vector<iovec>& parts, absl::Time deadline,
                        bool write);
  // Polls `p` without sleeping for up to spin() (not past `deadline`);
  // whether it became ready. False at once when spin() is zero or the
  // side is busy (set_spin).
  bool Spin(pollfd& p, absl::Time deadline);

  const int fd_;
  const std::string peer_;
  std::atomic<bool> shut_down_{false};
  absl::Duration spin_ = tcp_lane::kDefaultSpin;
  std::atomic<int>* busy_ = nullptr;
  std::atomic<int> own_{0};
};

// One iovec over `bytes` bytes at `data`.
inline iovec IoVec(const void* data, size_t bytes) {
  return iovec{const_cast<void*>(data), bytes};
}

// The host of a gRPC target ("host:port", "[v6]:port", "dns:///host:port",
// "ipv4:a.b.c.d:port"); empty for targets a TCP connection cannot reach
// (unix sockets, in-process).
std::string TcpLaneHost(absl::string_view target);

// A lane over float32 values in memory of the pserver's own (a TCP lane
// call's buffer, `bytes` long): nobody else writes it while the call runs,
// so a push's values are Stable. Offsets must be float-aligned.
class BufferLane final : public DenseValueLane {
 public:
  BufferLane(float* data, uint64_t bytes) : data_(data), bytes_(bytes) {}
  absl::Status Check(uint64_t offset, int64_t floats,
                     const char* what) const override;
  void Write(uint64_t offset, absl::Span<const float> values) const override;
  void Read(uint64_t offset, absl::Span<float> to) const override;
  const float* Stable(uint64_t offset, int64_t floats) const override;

 private:
  float* const data_;
  const uint64_t bytes_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_TCP_LANE_H_
