#include "trainer/transport/tcp_lane_client.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/transport/dense_pull.h"
#include "common/transport/dense_push.h"
#include "glog/logging.h"
#include "proto/ps_service.pb.h"

namespace shardps {
namespace {

using tcp_lane::CallHeader;
using tcp_lane::ReplyHeader;

// An answer of the pserver that says the lane no longer leads to the job
// (it ended there, or the trainer's ticket was replaced): the call goes
// again through gRPC, and so do the later ones.
bool IsLaneGone(const absl::Status& s) {
  return absl::IsNotFound(s) && absl::StartsWith(s.message(), "TCP lane:");
}

// No room for the call's values on the pserver: this call goes through gRPC.
bool IsLaneFull(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         absl::StartsWith(s.message(), "TCP lane:");
}

// Reads a reply header and its message; the status it carries into
// *answer. The connection's failure otherwise (a header out of bounds
// included).
absl::Status ReadAnswer(TcpLaneSocket& socket, absl::Time deadline,
                        ReplyHeader* h, absl::Status* answer) {
  if (absl::Status s = socket.Read({IoVec(h, sizeof(*h))}, deadline); !s.ok()) {
    return s;
  }
  if (h->message_bytes > tcp_lane::kMaxMessageBytes ||
      h->reply_bytes > tcp_lane::kMaxRequestBytes ||
      h->code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::DataLossError(absl::StrCat("TCP lane to ", socket.peer(),
                                            ": a reply header out of bounds"));
  }
  std::string message(h->message_bytes, '\0');
  if (absl::Status s =
          socket.Read({IoVec(message.data(), message.size())}, deadline);
      !s.ok()) {
    return s;
  }
  *answer = absl::Status(static_cast<absl::StatusCode>(h->code), message);
  return absl::OkStatus();
}

// The lane calls in progress in this process (those of every pserver's
// client) and the connections spinning: one within its call spins only
// while at most one other call or spinner is counted
// (TcpLaneSocket::set_spin, tcp_lane::kSpinAlongside).
std::atomic<int>& Busy() {
  static auto* calls = new std::atomic<int>(0);
  return *calls;
}

// Bytes a value takes in `encoding` on the lane; 0 for encodings it does
// not carry (threshold messages go over gRPC).
size_t ValueBytes(ValueEncoding encoding) {
  switch (encoding) {
    case FLOAT32:
      return sizeof(float);
    case FLOAT16:
    case BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

// Checks the reply of a pull over the lane against `req` (the same blocks,
// at the offsets asked for, values outside the message) and, for 16-bit
// values (`scratch`, the stream's bytes), decodes them into `targets`;
// float32 values were read into them already. DATA_LOSS naming `from`.
absl::Status TakeLanePull(absl::string_view from, const PullRequest& req,
                          const std::vector<uint64_t>& offsets,
                          const std::string* scratch,
                          const DensePullTargets& targets, PullResponse* resp) {
  if (absl::Status s = CheckPullBlockCounts(from, req, *resp, targets);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < resp->blocks_size(); ++i) {
    const DenseBlock& got = resp->blocks(i);
    const BlockRef& want = req.blocks(i);
    if (got.table_id() != want.table_id() || got.block() != want.block() ||
        got.encoding() != req.encoding() || !got.values().empty() ||
        got.shared_offset() != offsets[i]) {
      return MismatchedPullBlock(from, i);
    }
  }
  if (scratch == nullptr) return absl::OkStatus();
  for (int i = 0; i < resp->blocks_size(); ++i) {
    const uint64_t end =
        i + 1 < resp->blocks_size() ? offsets[i + 1] : scratch->size();
    resp->mutable_blocks(i)->set_values(scratch->data() + offsets[i],
                                        end - offsets[i]);
  }
  return TakeDensePull(from, req, *resp, targets);
}

}  // namespace

struct TcpLanePsClient::Call {
  uint64_t id = 0;
  tcp_lane::Method method = tcp_lane::kPush;
  std::string request;
  // A push's values (the caller's gradients) or a pull's targets (the
  // caller's parameters), in the order of the request's blocks.
  std::vector<iovec> values;
  uint64_t value_bytes = 0;
  google::protobuf::Message* resp = nullptr;
  // A 16-bit pull's values as they came, decoded by `check`.
  std::shared_ptr<std::string> scratch;
  // Checks an OK answer (a pull's blocks).
  std::function<absl::Status()> check;
  // Sends the call again through the pserver's client.
  std::function<void(StatusCallback)> resend;
  StatusCallback done;
};

TcpLanePsClient::TcpLanePsClient(PsClientInterface* inner,
                                 const Options& options)
    : ForwardingPsClient(inner), options_(options) {}

absl::StatusOr<std::unique_ptr<TcpLanePsClient>> TcpLanePsClient::Open(
    PsClientInterface* inner, const RequestStamp& stamp,
    const Options& options) {
  const std::string host = TcpLaneHost(inner->address());
  if (host.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "its address ", inner->address(), " is not a TCP host and port"));
  }
  if (options.connections < 1) {
    return absl::InvalidArgumentError("a TCP lane needs 1 connection or more");
  }
  if (options.spin < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a TCP lane's spin cannot be negative");
  }
  TcpLaneRequest req;
  req.set_trainer_id(stamp.trainer_id());
  req.set_incarnation(stamp.incarnation());
  TcpLaneResponse resp;
  if (absl::Status s = inner->OpenTcpLane(req, &resp); !s.ok()) return s;
  if (resp.ticket().size() != tcp_lane::kTicketBytes || resp.port() == 0 ||
      resp.port() > 65535) {
    return absl::FailedPreconditionError(
        "the pserver answered OpenTcpLane without a port and ticket");
  }
  std::unique_ptr<TcpLanePsClient> c(new TcpLanePsClient(inner, options));
  for (int i = 0; i < options.connections; ++i) {
    const absl::Time deadline = absl::Now() + options.connect_timeout;
    auto socket =
        TcpLaneSocket::Connect(host, static_cast<int>(resp.port()), deadline);
    if (!socket.ok()) return socket.status();
    // Its own call counts.
    (*socket)->set_spin(options.spin, &Busy(), 1);
    tcp_lane::Hello hello;
    std::memcpy(hello.ticket, resp.ticket().data(), tcp_lane::kTicketBytes);
    ReplyHeader h;
    absl::Status answer;
    absl::Status s = (*socket)->Write({IoVec(&hello, sizeof(hello))}, deadline);
    if (s.ok()) s = ReadAnswer(**socket, deadline, &h, &answer);
    if (s.ok()) s = answer;
    if (!s.ok()) return s;
    c->sockets_.push_back(*std::move(socket));
  }
  {
    absl::MutexLock l(&c->mu_);
    c->busy_.assign(c->sockets_.size(), 0);
  }
  for (size_t i = 0; i < c->sockets_.size(); ++i) {
    c->workers_.emplace_back([p = c.get(), i] { p->Worker(i); });
  }
  return c;
}

TcpLanePsClient::~TcpLanePsClient() {
  std::deque<std::unique_ptr<Call>> queued;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    cancelled_ = next_call_;
    queued = TakeAllQueued();
  }
  for (auto& s : sockets_) s->Shutdown();
  for (std::thread& t : workers_) t.join();
  for (auto& call : queued) {
    call->done(absl::CancelledError("TCP lane: the client was closed"));
  }
}

void TcpLanePsClient::CancelCalls() {
  std::deque<std::unique_ptr<Call>> queued;
  {
    absl::MutexLock l(&mu_);
    cancelled_ = next_call_ - 1;
    queued = TakeAllQueued();
    for (size_t i = 0; i < busy_.size(); ++i) {
      if (busy_[i] != 0) sockets_[i]->Shutdown();
    }
  }
  for (auto& call : queued) {
    call->done(absl::CancelledError("TCP lane: call cancelled"));
  }
  inner_->CancelCalls();
}

void TcpLanePsClient::Lose(const absl::Status& why) {
  if (!lost_.exchange(true)) {
    LOG(WARNING) << "pserver " << address() << ": " << why.message()
                 << "; dense values go over gRPC from now on";
  }
  std::deque<std::unique_ptr<Call>> queued;
  {
    absl::MutexLock l(&mu_);
    queued = TakeAllQueued();
  }
  for (auto& call : queued) call->resend(std::move(call->done));
}

void TcpLanePsClient::Enqueue(std::unique_ptr<Call> call) {
  {
    absl::MutexLock l(&mu_);
    if (!stop_ && !lost()) {
      call->id = next_call_++;
      (defer_ ? deferred_ : queue_).push_back(std::move(call));
      return;
    }
  }
  call->resend(std::move(call->done));
}

std::deque<std::unique_ptr<TcpLanePsClient::Call>>
TcpLanePsClient::TakeAllQueued() {
  std::deque<std::unique_ptr<Call>> all;
  all.swap(queue_);
  for (auto& call : deferred_) all.push_back(std::move(call));
  deferred_.clear();
  return all;
}

void TcpLanePsClient::Undefer() {
  for (auto& call : deferred_) queue_.push_back(std::move(call));
  deferred_.clear();
}

void TcpLanePsClient::ReleaseDeferred() {
  absl::MutexLock l(&mu_);
  Undefer();
}

void TcpLanePsClient::set_defer(bool defer) {
  absl::MutexLock l(&mu_);
  defer_ = defer;
  if (!defer) Undefer();
}

std::unique_ptr<TcpLanePsClient::Call> TcpLanePsClient::Take(size_t i) {
  std::unique_ptr<Call> call = std::move(queue_.front());
  queue_.pop_front();
  busy_[i] = call->id;
  return call;
}

void TcpLanePsClient::Worker(size_t i) {
  const auto has_work = [this, i]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || (!queue_.empty() && busy_[i] == 0);
  };
  while (true) {
    std::unique_ptr<Call> call;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(&has_work));
      if (stop_ || sockets_[i]->shut_down()) return;
      call = Take(i);
    }
    if (!Run(i, std::move(call))) return;
  }
}

bool TcpLanePsClient::RunQueued(const std::function<void()>& taken) {
  std::unique_ptr<Call> call;
  size_t i = 0;
  {
    absl::MutexLock l(&mu_);
    Undefer();
    if (stop_ || queue_.empty()) return false;
    while (i < busy_.size() && (busy_[i] != 0 || sockets_[i]->shut_down())) {
      ++i;
    }
    if (i == busy_.size()) return false;
    call = Take(i);
  }
  if (taken) taken();
  Run(i, std::move(call));
  return true;
}

bool TcpLanePsClient::Run(size_t i, std::unique_ptr<Call> call) {
  TcpLaneSocket& socket = *sockets_[i];
  absl::Status answer;
  Busy().fetch_add(1, std::memory_order_relaxed);
  const absl::Status io = Exchange(socket, *call, &answer);
  Busy().fetch_sub(1, std::memory_order_relaxed);
  // Closed before another thread may take the connection.
  if (!io.ok()) socket.Shutdown();
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    busy_[i] = 0;
    cancelled = call->id <= cancelled_;
  }
  if (cancelled) {
    call->done(absl::CancelledError("TCP lane: call cancelled"));
    if (io.ok()) return true;
    // Its connection was closed to cancel it.
    Lose(absl::CancelledError("TCP lane: calls cancelled"));
    return false;
  }
  if (!io.ok() || IsLaneGone(answer)) {
    // Sent again through gRPC: a pull changes nothing, and a push keeps
    // its request id, so the pserver applies it once.
    socket.Shutdown();
    Lose(io.ok() ? answer : io);
    call->resp->Clear();
    call->resend(std::move(call->done));
    return false;
  }
  if (IsLaneFull(answer) || absl::IsDeadlineExceeded(answer) ||
      absl::IsUnavailable(answer)) {
    // No room on the pserver, a pull that waited its longest, a pserver
    // shutting down: this call again through gRPC, which waits for the
    // pserver and retries (--rpc_retry_s) as for any transient failure.
    if (absl::IsUnavailable(answer)) Lose(answer);
    call->resp->Clear();
    call->resend(std::move(call->done));
    return true;
  }
  if (answer.ok() && call->check) answer = call->check();
  call->done(std::move(answer));
  return true;
}

absl::Status TcpLanePsClient::Exchange(TcpLaneSocket& socket, Call& call,
                                       absl::Status* answer) {
  const absl::Time deadline = absl::Now() + options_.deadline;
  CallHeader h;
  h.method = call.method;
  h.request_bytes = static_cast<uint32_t>(call.request.size());
  h.value_bytes = call.value_bytes;
  std::vector<iovec> out = {IoVec(&h, sizeof(h)),
                            IoVec(call.request.data(), call.request.size())};
  if (call.method == tcp_lane::kPush) {
    out.insert(out.end(), call.values.begin(), call.values.end());
  }
  if (absl::Status s = socket.Write(std::move(out), deadline); !s.ok()) {
    return s;
  }
  ReplyHeader r;
  if (absl::Status s = ReadAnswer(socket, deadline, &r, answer); !s.ok()) {
    return s;
  }
  const uint64_t values =
      answer->ok() && call.method == tcp_lane::kPull ? call.value_bytes : 0;
  if (r.value_bytes != values) {
    return absl::DataLossError(absl::StrCat("TCP lane to ", socket.peer(),
                                            ": a reply with ", r.value_bytes,
                                            " bytes of values, not ", values));
  }
  std::string reply(r.reply_bytes, '\0');
  std::vector<iovec> in = {IoVec(reply.data(), reply.size())};
  if (values > 0) in.insert(in.end(), call.values.begin(), call.values.end());
  if (absl::Status s = socket.Read(std::move(in), deadline); !s.ok()) {
    return s;
  }
  if (answer->ok() && !call.resp->ParseFromString(reply)) {
    return absl::DataLossError(absl::StrCat("TCP lane to ", socket.peer(),
                                            ": a reply that does not parse"));
  }
  return absl::OkStatus();
}

void TcpLanePsClient::PullDenseAsync(const PullRequest& req,
                                     const DensePullTargets* targets,
                                     PullResponse* resp, StatusCallback done) {
  const size_t width = ValueBytes(req.encoding());
  const bool fits = !lost() && width > 0 && req.blocks_size() > 0 &&
                    req.sparse_size() == 0 && !req.lars_norms() &&
                    req.shared_region() == 0 &&
                    targets->size() == static_cast<size_t>(req.blocks_size());
  uint64_t bytes = 0;
  if (fits) {
    for (const absl::Span<float>& t : *targets) bytes += t.size() * width;
  }
  if (!fits || bytes > tcp_lane::kMaxValueBytes) {
    inner_->PullDenseAsync(req, targets, resp, std::move(done));
    return;
  }
  auto call = std::make_unique<Call>();
  call->method = tcp_lane::kPull;
  call->value_bytes = bytes;
  call->resp = resp;
  PullRequest lane = req;
  uint64_t at = 0;
  std::vector<uint64_t> offsets;
  for (int i = 0; i < req.blocks_size(); ++i) {
    const absl::Span<float>& t = (*targets)[i];
    lane.mutable_blocks(i)->set_shared_offset(at);
    offsets.push_back(at);
    if (width == sizeof(float)) {
      // Straight into the caller's parameters.
      call->values.push_back(IoVec(t.data(), t.size() * sizeof(float)));
    }
    at += t.size() * width;
  }
  if (width != sizeof(float)) {
    // 16-bit values: into the call's own bytes, decoded once checked.
    call->scratch = std::make_shared<std::string>(bytes, '\0');
    call->values.push_back(IoVec(call->scratch->data(), bytes));
  }
  call->request = lane.SerializeAsString();
  call->check = [this, &req, targets, resp, offsets = std::move(offsets),
                 scratch = call->scratch]() {
    return TakeLanePull(address(), req, offsets, scratch.get(), *targets, resp);
  };
  call->resend = [this, &req, targets, resp](StatusCallback cb) {
    inner_->PullDenseAsync(req, targets, resp, std::move(cb));
  };
  call->done = std::move(done);
  Enqueue(std::move(call));
}

void TcpLanePsClient::PushDenseAsync(const DensePush& push, PushResponse* resp,
                                     StatusCallback done) {
  bool fits =
      !lost() && !push.blocks.empty() && push.header.shared_region() == 0;
  uint64_t bytes = 0;
  for (size_t i = 0; fits && i < push.blocks.size(); ++i) {
    fits = ValueBytes(push.blocks[i].encoding) > 0;
    bytes += push.blocks[i].bytes.size();
  }
  if (!fits || bytes > tcp_lane::kMaxValueBytes) {
    inner_->PushDenseAsync(push, resp, std::move(done));
    return;
  }
  auto call = std::make_unique<Call>();
  call->method = tcp_lane::kPush;
  call->value_bytes = bytes;
  call->resp = resp;
  DensePush lane;
  lane.header = push.header;
  uint64_t at = 0;
  for (const DenseValuesRef& b : push.blocks) {
    DenseValuesRef ref = b;
    ref.bytes = absl::string_view();
    ref.shared_offset = at;
    lane.blocks.push_back(ref);
    call->values.push_back(IoVec(b.bytes.data(), b.bytes.size()));
    at += b.bytes.size();
  }
  call->request = ToPushRequest(lane).SerializeAsString();
  call->resend = [this, &push, resp](StatusCallback cb) {
    inner_->PushDenseAsync(push, resp, std::move(cb));
  };
  call->done = std::move(done);
  Enqueue(std::move(call));
}

}  // namespace shardps
