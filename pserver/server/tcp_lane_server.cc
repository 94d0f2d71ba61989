#include "pserver/server/tcp_lane_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "proto/ps_service.pb.h"

namespace shardps {
namespace {

using tcp_lane::CallHeader;
using tcp_lane::ReplyHeader;

// Lane calls in progress in this process, from header to answer, on every
// TcpLaneServer's connections, and the connections spinning
// (TcpLaneSocket::set_spin): a connection, waiting for a call or within
// its own (for the rest of the values, or room for the answer), spins only
// while at most one other call or spinner is counted
// (tcp_lane::kSpinAlongside), leaving the cores to the calls.
std::atomic<int>& Busy() {
  static auto* calls = new std::atomic<int>(0);
  return *calls;
}

// Counts a call in Busy() while it lasts, its socket's own.
class CountedCall {
 public:
  explicit CountedCall(TcpLaneSocket& socket) : socket_(socket) {
    Busy().fetch_add(1, std::memory_order_relaxed);
    socket_.set_own(1);
  }
  ~CountedCall() {
    socket_.set_own(0);
    Busy().fetch_sub(1, std::memory_order_relaxed);
  }
  CountedCall(const CountedCall&) = delete;
  CountedCall& operator=(const CountedCall&) = delete;

 private:
  TcpLaneSocket& socket_;
};

// Sends `status` as a reply header and its message, with `reply` and
// `values` (a pull answered OK) after them.
absl::Status SendReply(TcpLaneSocket& socket, const absl::Status& status,
                       const std::string& reply, const void* values,
                       uint64_t value_bytes, absl::Time deadline) {
  const absl::string_view message =
      status.message().substr(0, tcp_lane::kMaxMessageBytes);
  ReplyHeader h;
  h.code = static_cast<uint32_t>(status.code());
  h.message_bytes = static_cast<uint32_t>(message.size());
  h.reply_bytes = static_cast<uint32_t>(reply.size());
  h.value_bytes = value_bytes;
  return socket.Write(
      {IoVec(&h, sizeof(h)), IoVec(message.data(), message.size()),
       IoVec(reply.data(), reply.size()), IoVec(values, value_bytes)},
      deadline);
}

// The peer's address, as "ip:port".
std::string PeerOf(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof(host),
                  port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return a.ss_family == AF_INET6 ? absl::StrCat("[", host, "]:", port)
                                 : absl::StrCat(host, ":", port);
}

// A bound, listening socket on host:port, and the port bound.
absl::StatusOr<std::pair<int, int>> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const std::string where = absl::StrCat(host, ":", port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                           service.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(absl::StrCat("TCP lane: cannot listen on ",
                                               where, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof(bound);
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      const int p =
          bound.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      freeaddrinfo(found);
      return std::make_pair(fd, p);
    }
    why = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("TCP lane: cannot listen on ", where, ": ", why));
}

// INVALID_ARGUMENT for a call header out of bounds, NOT_FOUND when the
// ticket was replaced.
absl::Status CheckCallHeader(const CallHeader& h, bool revoked) {
  if (h.method != tcp_lane::kPush && h.method != tcp_lane::kPull) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP lane: unknown method ", h.method));
  }
  if (h.request_bytes > tcp_lane::kMaxRequestBytes ||
      h.value_bytes > tcp_lane::kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TCP lane: a call of ", h.request_bytes, " request bytes and ",
        h.value_bytes, " value bytes (at most ", tcp_lane::kMaxRequestBytes,
        " and ", tcp_lane::kMaxValueBytes, ")"));
  }
  if (revoked) {
    return absl::NotFoundError(
        "TCP lane: its ticket was replaced (the trainer opened another)");
  }
  return absl::OkStatus();
}

// Parses a call's request into *req (and makes *resp) and says whether its
// values stay in the buffer (*in_place: float32, read there by the
// handler) or go into the message (16-bit values). INVALID_ARGUMENT for a
// request that does not parse or asks for an encoding the lane does not
// carry, PERMISSION_DENIED for one naming another trainer.
absl::Status ParseCall(bool push, const std::string& bytes, int trainer_id,
                       std::unique_ptr<google::protobuf::Message>* req,
                       std::unique_ptr<google::protobuf::Message>* resp,
                       bool* in_place) {
  bool parsed = false;
  int named = 0;
  bool carried = true;
  if (push) {
    auto r = std::make_unique<PushRequest>();
    parsed = r->ParseFromString(bytes);
    named = r->trainer_id();
    for (const DenseBlock& b : r->blocks()) {
      carried = carried && b.encoding() != THRESHOLD;
      *in_place = *in_place && b.encoding() == FLOAT32;
    }
    *req = std::move(r);
    *resp = std::make_unique<PushResponse>();
  } else {
    auto r = std::make_unique<PullRequest>();
    parsed = r->ParseFromString(bytes);
    named = r->trainer_id();
    carried = r->encoding() != THRESHOLD;
    *in_place = r->encoding() == FLOAT32;
    *req = std::move(r);
    *resp = std::make_unique<PullResponse>();
  }
  if (!parsed) {
    return absl::InvalidArgumentError(
        "TCP lane: a request that does not parse");
  }
  if (named != trainer_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("TCP lane: trainer ", named,
                     " named through the lane of trainer ", trainer_id));
  }
  if (!carried) {
    return absl::InvalidArgumentError(
        "TCP lane: threshold-encoded values go over gRPC");
  }
  return absl::OkStatus();
}

// A 16-bit push: block i's values are bytes [offset i, offset i+1) of the
// call's `bytes` values (the last to the end), moved into the message.
// INVALID_ARGUMENT for offsets that do not start at 0 and rise.
absl::Status InlinePushValues(const char* values, uint64_t bytes,
                              PushRequest* req) {
  const int n = req->blocks_size();
  for (int i = 0; i < n; ++i) {
    DenseBlock* b = req->mutable_blocks(i);
    const uint64_t begin = b->shared_offset();
    const uint64_t end = i + 1 < n ? req->blocks(i + 1).shared_offset() : bytes;
    if ((i == 0 && begin != 0) || end < begin || end > bytes ||
        !b->values().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TCP lane: block ", i, " of a push lies at bytes ",
                       begin, " to ", end, " of ", bytes,
                       " (blocks in order, from 0, values not in "
                       "the message)"));
    }
    b->set_values(values + begin, end - begin);
    b->set_shared_offset(0);
  }
  return absl::OkStatus();
}

// A 16-bit pull's reply: each block's values moved into *moved, the block
// naming where they lie in the stream. Returns the bytes in all.
uint64_t MovePullValues(PullResponse* resp, std::vector<std::string>* moved) {
  uint64_t at = 0;
  for (DenseBlock& b : *resp->mutable_blocks()) {
    moved->emplace_back();
    moved->back().swap(*b.mutable_values());
    b.set_shared_offset(at);
    at += moved->back().size();
  }
  return at;
}

// What a float32 push over the lane would weigh as a gRPC message, its
// values in each block's `values` (block i's are bytes [shared_offset i,
// shared_offset i+1) of the call's `value_bytes`): the pserver's received
// bytes then match what the trainer counts, whichever way the values came.
uint64_t MessageBytesOfLanePush(const PushRequest& req, uint64_t value_bytes) {
  using google::protobuf::io::CodedOutputStream;
  uint64_t total = req.ByteSizeLong();
  const int n = req.blocks_size();
  for (int i = 0; i < n; ++i) {
    const DenseBlock& b = req.blocks(i);
    const uint64_t lane = b.ByteSizeLong();
    const uint64_t end =
        i + 1 < n ? req.blocks(i + 1).shared_offset() : value_bytes;
    const uint64_t len = end > b.shared_offset() ? end - b.shared_offset() : 0;
    uint64_t message = lane;
    if (b.shared_offset() != 0) {
      message -= 1 + CodedOutputStream::VarintSize64(b.shared_offset());
    }
    if (len > 0) message += 1 + CodedOutputStream::VarintSize64(len) + len;
    // The block's own length prefix changes with it (tag: 1 byte).
    total = total - CodedOutputStream::VarintSize64(lane) - lane +
            CodedOutputStream::VarintSize64(message) + message;
  }
  return total;
}

// A call's request parsed (ParseCall), and a push whose values cannot be
// read in place gets them in its message (InlinePushValues).
absl::Status ParseLaneCall(bool push, const std::string& request,
                           int trainer_id, const float* values,
                           uint64_t value_bytes,
                           std::unique_ptr<google::protobuf::Message>* req,
                           std::unique_ptr<google::protobuf::Message>* resp,
                           bool* in_place) {
  RETURN_IF_ERROR(ParseCall(push, request, trainer_id, req, resp, in_place));
  if (!push || *in_place) return absl::OkStatus();
  return InlinePushValues(reinterpret_cast<const char*>(values), value_bytes,
                          static_cast<PushRequest*>(req->get()));
}

// The bytes a float32 push's values add to its message, as a trainer counts
// them; 0 without metrics, where nobody reads them (it walks the blocks).
uint64_t LanePushValueBytes(const PushRequest& req, uint64_t value_bytes,
                            bool metrics) {
  return metrics ? MessageBytesOfLanePush(req, value_bytes) - req.ByteSizeLong()
                 : 0;
}

std::string RandomTicket() {
  std::string t(tcp_lane::kTicketBytes, '\0');
  size_t got = 0;
  while (got < t.size()) {
    const ssize_t n = getrandom(&t[got], t.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return t;
}

}  // namespace

int TcpLaneServer::busy() { return Busy().load(); }

// A connection's values: zero-filled when it grows, so that a pull whose
// blocks leave gaps never sends memory of another job; counted in the
// budget while the connection lasts.
class TcpLaneServer::Buffer {
 public:
  explicit Buffer(MemoryBudget* budget) : budget_(budget) {}
  ~Buffer() { budget_->Release(static_cast<int64_t>(capacity_)); }
  // Room for `bytes`; false when the budget has none.
  bool Ensure(uint64_t bytes) {
    if (bytes <= capacity_) return true;
    const uint64_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
    const int64_t more =
        static_cast<int64_t>(floats * sizeof(float) - capacity_);
    if (!budget_->TryReserve(more)) return false;
    data_ = std::make_unique<float[]>(floats);
    capacity_ = floats * sizeof(float);
    return true;
  }
  float* data() { return data_.get(); }

 private:
  MemoryBudget* const budget_;
  std::unique_ptr<float[]> data_;
  uint64_t capacity_ = 0;
};

absl::StatusOr<std::unique_ptr<TcpLaneServer>> TcpLaneServer::Start(
    Dispatcher* dispatcher, MemoryBudget* budget, Options options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tcp_lane_port must be in [0, 65535], got ", options.port));
  }
  auto listening = Listen(options.host, options.port);
  if (!listening.ok()) return listening.status();
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(listening->first);
    return absl::UnavailableError(
        absl::StrCat("TCP lane: eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<TcpLaneServer>(
      new TcpLaneServer(dispatcher, budget, std::move(options),
                        listening->first, wake, listening->second));
}

TcpLaneServer::TcpLaneServer(Dispatcher* dispatcher, MemoryBudget* budget,
                             Options options, int listen_fd, int wake_fd,
                             int port)
    : dispatcher_(dispatcher),
      budget_(budget),
      options_(std::move(options)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

TcpLaneServer::~TcpLaneServer() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

void TcpLaneServer::Stop() {
  if (stopping_.exchange(true)) {
    if (accept_thread_.joinable()) accept_thread_.join();
    return;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<Connection> connections;
  {
    absl::MutexLock l(&mu_);
    for (Connection& c : connections_) c.socket->Shutdown();
    connections.swap(connections_);
  }
  for (Connection& c : connections) c.thread.join();
}

int TcpLaneServer::connections() const {
  absl::MutexLock l(&mu_);
  int n = 0;
  for (const Connection& c : connections_) n += !c.finished.load();
  return n;
}

std::string TcpLaneServer::Issue(const std::string& job_id,
                                 const std::shared_ptr<RequestHandler>& job,
                                 int trainer_id) {
  auto grant = std::make_shared<Grant>();
  grant->job_id = job_id;
  grant->job = job;
  grant->trainer_id = trainer_id;
  grant->ticket = RandomTicket();
  absl::MutexLock l(&mu_);
  // The grants of jobs that have ended go.
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second->job.expired()) {
      tickets_.erase({it->second->job_id, it->second->trainer_id});
      grants_.erase(it++);
    } else {
      ++it;
    }
  }
  std::string& ticket = tickets_[{job_id, trainer_id}];
  if (auto old = grants_.find(ticket); old != grants_.end()) {
    old->second->revoked.store(true);
    grants_.erase(old);
  }
  ticket = grant->ticket;
  grants_[ticket] = grant;
  return grant->ticket;
}

void TcpLaneServer::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->finished.load()) {
      it->thread.join();
      connections_.erase(it++);
    } else {
      ++it;
    }
  }
}

void TcpLaneServer::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) {
      LOG(ERROR) << "TCP lane: poll: " << std::strerror(errno)
                 << "; no more connections are accepted";
      return;
    }
    if (stopping_.load()) return;
    if ((p[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto socket = std::make_unique<TcpLaneSocket>(fd, PeerOf(fd));
    // Its own call counts from its header on (CountedCall).
    socket->set_spin(options_.spin, &Busy(), 0);
    absl::MutexLock l(&mu_);
    Reap();
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      const absl::Status full = absl::ResourceExhaustedError(
          absl::StrCat("TCP lane: ", options_.max_connections,
                       " connections already; values go over gRPC"));
      (void)SendReply(*socket, full, "", nullptr, 0,
                      absl::Now() + absl::Milliseconds(100));
      continue;
    }
    connections_.emplace_back();
    Connection* c = &connections_.back();
    c->socket = std::move(socket);
    c->thread = std::thread([this, c] { Serve(c); });
  }
}

void TcpLaneServer::Serve(Connection* c) {
  TcpLaneSocket& socket = *c->socket;
  absl::StatusOr<std::shared_ptr<Grant>> grant = Hello(socket);
  if (grant.ok()) {
    Buffer buffer(budget_);
    absl::Status s;
    while (s.ok() && !stopping_.load()) s = ServeCall(socket, **grant, buffer);
    if (!socket.shut_down()) {
      VLOG(1) << "TCP lane from " << socket.peer() << " closed: " << s;
    }
    (*grant)->connections.fetch_sub(1);
  } else {
    LOG(WARNING) << "TCP lane from " << socket.peer()
                 << " refused: " << grant.status();
  }
  socket.Shutdown();
  c->finished.store(true);
}

absl::StatusOr<std::shared_ptr<TcpLaneServer::Grant>> TcpLaneServer::Hello(
    TcpLaneSocket& socket) {
  const absl::Time deadline = absl::Now() + options_.hello_timeout;
  tcp_lane::Hello hello;
  absl::Status s = socket.Read({IoVec(&hello, sizeof(hello))}, deadline);
  if (!s.ok()) return s;
  std::shared_ptr<Grant> grant;
  if (hello.magic != tcp_lane::kMagic) {
    s = absl::InvalidArgumentError(
        "TCP lane: not a ShardPS lane hello (wrong magic)");
  } else {
    absl::MutexLock l(&mu_);
    auto it = grants_.find(absl::string_view(
        reinterpret_cast<const char*>(hello.ticket), tcp_lane::kTicketBytes));
    if (it == grants_.end()) {
      s = absl::PermissionDeniedError(
          "TCP lane: unknown ticket (ask OpenTcpLane for one)");
    } else {
      grant = it->second;
    }
  }
  if (s.ok() && grant->job.expired()) {
    s = absl::NotFoundError("TCP lane: the job has ended on this pserver");
  }
  if (s.ok() &&
      grant->connections.fetch_add(1) >= options_.max_connections_per_ticket) {
    grant->connections.fetch_sub(1);
    s = absl::ResourceExhaustedError(absl::StrCat(
        "TCP lane: trainer ", grant->trainer_id, " has ",
        options_.max_connections_per_ticket, " connections already"));
  }
  absl::Status sent = SendReply(socket, s, "", nullptr, 0, deadline);
  if (s.ok() && !sent.ok()) {
    grant->connections.fetch_sub(1);
    return sent;
  }
  if (!s.ok()) return s;
  return grant;
}

absl::Status TcpLaneServer::ServeCall(TcpLaneSocket& socket, Grant& grant,
                                      Buffer& buffer) {
  CallHeader h;
  // A connection may stay idle between calls as long as it likes.
  if (absl::Status s =
          socket.Read({IoVec(&h, sizeof(h))}, absl::InfiniteFuture());
      !s.ok()) {
    return s;
  }
  const CountedCall counted(socket);
  const absl::Time deadline = absl::Now() + options_.call_timeout;
  if (absl::Status bad = CheckCallHeader(h, grant.revoked.load()); !bad.ok()) {
    // The framing cannot be trusted past this: answer, then close.
    (void)SendReply(socket, bad, "", nullptr, 0, deadline);
    return bad;
  }
  const bool push = h.method == tcp_lane::kPush;
  const PsRpc rpc = push ? PsRpc::kPush : PsRpc::kPull;
  std::string request(h.request_bytes, '\0');
  if (absl::Status s =
          socket.Read({IoVec(request.data(), request.size())}, deadline);
      !s.ok()) {
    return s;
  }
  const bool fits = buffer.Ensure(h.value_bytes);
  if (push) {
    absl::Status s =
        fits ? socket.Read({IoVec(buffer.data(), h.value_bytes)}, deadline)
             : socket.Skip(h.value_bytes, deadline);
    if (!s.ok()) return s;
  }
  if (!fits) {
    const absl::Status full = absl::ResourceExhaustedError(
        absl::StrCat("TCP lane: no room for ", h.value_bytes,
                     " bytes of values within --max_memory_mb"));
    dispatcher_->Refused(rpc, full, request.size());
    return SendReply(socket, full, "", nullptr, 0, deadline);
  }
  std::shared_ptr<RequestHandler> job = grant.job.lock();
  if (job == nullptr) {
    const absl::Status gone =
        absl::NotFoundError("TCP lane: the job has ended on this pserver");
    (void)SendReply(socket, gone, "", nullptr, 0, deadline);
    return gone;
  }
  std::unique_ptr<google::protobuf::Message> req, resp;
  bool in_place = true;
  if (absl::Status refused =
          ParseLaneCall(push, request, grant.trainer_id, buffer.data(),
                        h.value_bytes, &req, &resp, &in_place);
      !refused.ok()) {
    dispatcher_->Refused(rpc, refused, request.size());
    return SendReply(socket, refused, "", nullptr, 0, deadline);
  }
  const absl::Status status = Dispatch(job, rpc, grant, socket.peer(),
                                       in_place ? buffer.data() : nullptr,
                                       h.value_bytes, *req, resp.get());
  return Answer(socket, status, push, in_place, buffer.data(), h.value_bytes,
                resp.get(), absl::Now() + options_.call_timeout);
}

absl::Status TcpLaneServer::Dispatch(const std::shared_ptr<RequestHandler>& job,
                                     PsRpc rpc, const Grant& grant,
                                     const std::string& peer, float* values,
                                     uint64_t value_bytes,
                                     const google::protobuf::Message& req,
                                     google::protobuf::Message* resp) {
  CallContext ctx;
  ctx.job_id = grant.job_id;
  ctx.peer = peer;
  if (values != nullptr) {
    ctx.lane = std::make_shared<BufferLane>(values, value_bytes);
    // Counted with the call's bytes, as the trainer counts them.
    ctx.value_bytes =
        rpc == PsRpc::kPush
            ? LanePushValueBytes(static_cast<const PushRequest&>(req),
                                 value_bytes, dispatcher_->has_metrics())
            : value_bytes;
  }
  absl::Notification answered;
  absl::Status status;
  dispatcher_->CallOn(job, rpc, ctx, req, resp, [&](absl::Status s) {
    status = std::move(s);
    answered.Notify();
  });
  answered.WaitForNotification();
  return status;
}

absl::Status TcpLaneServer::Answer(TcpLaneSocket& socket,
                                   const absl::Status& status, bool push,
                                   bool in_place, const float* values,
                                   uint64_t value_bytes,
                                   google::protobuf::Message* resp,
                                   absl::Time deadline) {
  if (!status.ok()) return SendReply(socket, status, "", nullptr, 0, deadline);
  if (push) {
    return SendReply(socket, status, resp->SerializeAsString(), nullptr, 0,
                     deadline);
  }
  if (in_place) {
    return SendReply(socket, status, resp->SerializeAsString(), values,
                     value_bytes, deadline);
  }
  // A 16-bit pull: each block's values leave the message for the stream.
  std::vector<std::string> moved;
  const uint64_t bytes =
      MovePullValues(static_cast<PullResponse*>(resp), &moved);
  const std::string reply = resp->SerializeAsString();
  const absl::string_view message = status.message();
  ReplyHeader h;
  h.reply_bytes = static_cast<uint32_t>(reply.size());
  h.message_bytes = static_cast<uint32_t>(message.size());
  h.value_bytes = bytes;
  std::vector<iovec> parts = {IoVec(&h, sizeof(h)),
                              IoVec(message.data(), message.size()),
                              IoVec(reply.data(), reply.size())};
  for (const std::string& v : moved) parts.push_back(IoVec(v.data(), v.size()));
  return socket.Write(std::move(parts), deadline);
}

}  // namespace shardps
