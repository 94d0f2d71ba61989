// The TCP lane end to end: a pserver served over gRPC in this process with
// its lane, a trainer's ParamClient whose dense values go over the lane
// (trainer/transport/tcp_lane_client.h), and hostile connections.
#include "pserver/server/tcp_lane_server.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "pserver/server/grpc_server.h"
#include "tests/client_server/grpc_one_table.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/transport/grpc_ps_client.h"

namespace shardps {
namespace {

using tcp_lane::CallHeader;
using tcp_lane::ReplyHeader;

class TcpLaneTest : public testing::GrpcOneTableTest {
 protected:
  void Start(bool lane = true, absl::Duration max_pull_wait = absl::Seconds(20),
             absl::Duration spin = tcp_lane::kDefaultSpin) {
    GrpcServerOptions opts;
    opts.tcp_lane = lane;
    opts.tcp_lane_spin = spin;
    opts.pserver.store.max_pull_wait = max_pull_wait;
    opts.pserver.sweep_interval = absl::Milliseconds(20);
    GrpcOneTableTest::Start(opts);
  }

  // A ticket for trainer 0, asked for over gRPC.
  std::string Ticket() {
    TcpLaneRequest req;
    req.set_trainer_id(0);
    req.set_incarnation(3);
    TcpLaneResponse resp;
    absl::Status s = grpc_->OpenTcpLane(req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(resp.port(), static_cast<uint32_t>(server_->tcp_lane_port()));
    return resp.ticket();
  }

  // A raw connection to the lane that has sent `hello`; the answer's
  // status into *answer.
  std::unique_ptr<TcpLaneSocket> Connect(const tcp_lane::Hello& hello,
                                         absl::Status* answer) {
    auto socket = TcpLaneSocket::Connect("127.0.0.1", server_->tcp_lane_port(),
                                         Deadline());
    EXPECT_TRUE(socket.ok()) << socket.status();
    EXPECT_TRUE(
        (*socket)->Write({IoVec(&hello, sizeof(hello))}, Deadline()).ok());
    *answer = ReadAnswer(**socket, nullptr);
    return *std::move(socket);
  }

  static tcp_lane::Hello HelloWith(const std::string& ticket) {
    tcp_lane::Hello hello;
    std::memcpy(hello.ticket, ticket.data(),
                std::min(ticket.size(), tcp_lane::kTicketBytes));
    return hello;
  }

  static absl::Time Deadline() { return absl::Now() + absl::Seconds(10); }

  // Reads one reply: its status (UNAVAILABLE... when the connection
  // closed), the reply's bytes into *reply and its values dropped.
  static absl::Status ReadAnswer(TcpLaneSocket& socket, std::string* reply,
                                 std::vector<float>* values = nullptr) {
    ReplyHeader h;
    absl::Status s = socket.Read({IoVec(&h, sizeof(h))}, Deadline());
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("io: ", s.message()));
    std::string message(h.message_bytes, '\0');
    std::string bytes(h.reply_bytes, '\0');
    std::vector<float> v(h.value_bytes / sizeof(float));
    s = socket.Read(
        {IoVec(message.data(), message.size()),
         IoVec(bytes.data(), bytes.size()), IoVec(v.data(), h.value_bytes)},
        Deadline());
    if (!s.ok())
      return absl::Status(s.code(), absl::StrCat("io: ", s.message()));
    if (reply != nullptr) *reply = bytes;
    if (values != nullptr) *values = v;
    return absl::Status(static_cast<absl::StatusCode>(h.code), message);
  }

  // Sends a call of `request` with `values` (a push's, or the size of a
  // pull's reply values).
  static void SendCall(TcpLaneSocket& socket, tcp_lane::Method method,
                       const std::string& request, uint64_t value_bytes,
                       const std::vector<float>& values = {}) {
    CallHeader h;
    h.method = method;
    h.request_bytes = static_cast<uint32_t>(request.size());
    h.value_bytes = value_bytes;
    EXPECT_TRUE(
        socket
            .Write({IoVec(&h, sizeof(h)), IoVec(request.data(), request.size()),
                    IoVec(values.data(), values.size() * sizeof(float))},
                   Deadline())
            .ok());
  }

  // A pull of block `block` of "w" (2 floats) at `offset` of the values.
  static std::string PullOf(int trainer, uint32_t block, uint64_t offset) {
    PullRequest req;
    req.set_trainer_id(trainer);
    req.set_incarnation(3);  // the ticket's
    req.set_encoding(FLOAT32);
    BlockRef* b = req.add_blocks();
    b->set_table_id(0);
    b->set_block(block);
    b->set_shared_offset(offset);
    return req.SerializeAsString();
  }
};

TEST_F(TcpLaneTest, PushesAndPullsGoOverTheLane) {
  Start();
  ASSERT_GT(server_->tcp_lane_port(), 0);
  TcpLanePsClient::Options o;
  o.connections = 3;
  ASSERT_EQ(params_->UseTcpLane(o), 1);
  EXPECT_EQ(params_->tcp_lane_servers(), 1);
  EXPECT_EQ(server_->tcp_lane()->connections(), 3);
  std::vector<float> w = w_;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<float> g(6);
    for (int i = 0; i < 6; ++i) g[i] = 0.125f * (i + 1) * (step % 3 - 1);
    for (int i = 0; i < 6; ++i) w[i] -= g[i];
    ASSERT_EQ(Step(step, g), w) << "step " << step;
  }
  EXPECT_EQ(client_->over_grpc.load(), 0);
  // The connections' buffers are counted while they last.
  const int64_t held = server_->pserver()->memory_used_bytes();
  params_.reset();
  for (int i = 0; i < 500 && server_->tcp_lane()->connections() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(server_->tcp_lane()->connections(), 0);
  EXPECT_LT(server_->pserver()->memory_used_bytes(), held);
}

TEST_F(TcpLaneTest, WithoutSpinningAndWithOneConnectionToo) {
  Start();
  TcpLanePsClient::Options o;
  o.connections = 1;
  o.spin = absl::ZeroDuration();
  ASSERT_EQ(params_->UseTcpLane(o), 1);
  std::vector<float> w = w_;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<float> g(6, 0.25f * (step % 3 - 1));
    for (int i = 0; i < 6; ++i) w[i] -= g[i];
    ASSERT_EQ(Step(step, g), w) << "step " << step;
  }
  EXPECT_EQ(client_->over_grpc.load(), 0);
}

// Waits up to 5 s for TcpLaneServer::busy() to read `want`.
bool BusyReaches(int want) {
  for (int i = 0; i < 5000 && TcpLaneServer::busy() != want; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return TcpLaneServer::busy() == want;
}

TEST_F(TcpLaneTest, ACallAloneSpinsForTheRestOfItsValues) {
  // Longer than the test lasts: a connection that sleeps instead shows.
  Start(/*lane=*/true, absl::Seconds(20), /*spin=*/absl::Seconds(30));
  absl::Status answer;
  std::unique_ptr<TcpLaneSocket> socket = Connect(HelloWith(Ticket()), &answer);
  ASSERT_TRUE(answer.ok()) << answer;
  // Idle, the connection waits for a call spinning: itself.
  EXPECT_TRUE(BusyReaches(1)) << TcpLaneServer::busy();
  PushRequest push;
  push.set_trainer_id(0);
  push.set_incarnation(3);
  push.set_request_id(5);
  DenseBlock* b = push.add_blocks();
  b->set_table_id(0);
  b->set_block(0);
  b->set_encoding(FLOAT32);
  const std::string request = push.SerializeAsString();
  CallHeader h;
  h.method = tcp_lane::kPush;
  h.request_bytes = static_cast<uint32_t>(request.size());
  h.value_bytes = 2 * sizeof(float);
  ASSERT_TRUE(
      socket
          ->Write({IoVec(&h, sizeof(h)), IoVec(request.data(), request.size())},
                  Deadline())
          .ok());
  // Within its call, the only one, it spins for the values: the call and
  // itself.
  EXPECT_TRUE(BusyReaches(2)) << TcpLaneServer::busy();
  const float g[2] = {0.5f, 0.25f};
  ASSERT_TRUE(socket->Write({IoVec(g, sizeof(g))}, Deadline()).ok());
  answer = ReadAnswer(*socket, nullptr);
  ASSERT_TRUE(answer.ok()) << answer;
  SendCall(*socket, tcp_lane::kPull, PullOf(0, 0, 0), 8);
  std::vector<float> values;
  answer = ReadAnswer(*socket, nullptr, &values);
  ASSERT_TRUE(answer.ok()) << answer;
  EXPECT_EQ(values, (std::vector<float>{w_[0] - g[0], w_[1] - g[1]}));
}

TEST_F(TcpLaneTest, RunQueuedCarriesNothingWhenNothingIsQueued) {
  Start();
  auto lane = TcpLanePsClient::Open(client_.get(), stamp_, {});
  ASSERT_TRUE(lane.ok()) << lane.status();
  EXPECT_FALSE((*lane)->RunQueued());
  TcpLanePsClient::Options negative;
  negative.spin = absl::Microseconds(-1);
  auto bad = TcpLanePsClient::Open(client_.get(), stamp_, negative);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TcpLaneTest, ADeferredCallWaitsForTheThreadThatCarriesIt) {
  Start();
  auto lane = TcpLanePsClient::Open(client_.get(), stamp_, {});
  ASSERT_TRUE(lane.ok()) << lane.status();
  PullRequest req;
  stamp_.Stamp(&req);
  req.set_encoding(FLOAT32);
  BlockRef* b = req.add_blocks();
  b->set_table_id(0);
  b->set_block(0);
  std::vector<float> got(2, -1);
  const DensePullTargets targets = {absl::MakeSpan(got)};
  PullResponse resp;
  struct Answer {
    absl::Notification done;
    absl::Status status;
    std::thread::id carrier;
  };
  const auto pull = [&](Answer* a) {
    (*lane)->PullDenseAsync(req, &targets, &resp, [a](absl::Status s) {
      a->status = s;
      a->carrier = std::this_thread::get_id();
      a->done.Notify();
    });
  };
  (*lane)->set_defer(true);
  Answer first;
  pull(&first);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(first.done.HasBeenNotified());  // no worker took it
  EXPECT_TRUE((*lane)->RunQueued());
  ASSERT_TRUE(first.done.HasBeenNotified());
  EXPECT_EQ(first.carrier, std::this_thread::get_id());
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(got, (std::vector<float>{1, 2}));
  // Deferred, then released without a thread to carry it: a worker does.
  Answer second;
  got.assign(2, -1);
  pull(&second);
  (*lane)->set_defer(false);
  ASSERT_TRUE(second.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_NE(second.carrier, std::this_thread::get_id());
  EXPECT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(got, (std::vector<float>{1, 2}));
  EXPECT_FALSE((*lane)->RunQueued());
  EXPECT_EQ(client_->over_grpc.load(), 0);
}

TEST_F(TcpLaneTest, SixteenBitValuesGoOverTheLaneToo) {
  for (ValueEncoding e : {BFLOAT16, FLOAT16}) {
    SCOPED_TRACE(ValueEncoding_Name(e));
    Start();
    params_->set_encodings(e, e);
    ASSERT_EQ(params_->UseTcpLane({}), 1);
    // Values and steps that 16 bits hold exactly.
    std::vector<float> w = w_;
    for (int64_t step = 0; step < 6; ++step) {
      std::vector<float> g(6);
      for (int i = 0; i < 6; ++i) g[i] = 0.125f * ((i + step) % 3 - 1);
      for (int i = 0; i < 6; ++i) w[i] -= g[i];
      ASSERT_EQ(Step(step, g), w) << "step " << step;
    }
    EXPECT_EQ(client_->over_grpc.load(), 0);
    EXPECT_EQ(params_->tcp_lane_servers(), 1);
    params_.reset();
    jobs_.reset();
    server_.reset();
  }
}

TEST_F(TcpLaneTest, AReplacedTicketOrAStoppedLaneSendsTheCallsToGrpc) {
  Start();
  ASSERT_EQ(params_->UseTcpLane({}), 1);
  std::vector<float> w = w_;
  std::vector<float> g = {1, 1, 1, 1, 1, 1};
  for (float& v : w) v -= 1;
  ASSERT_EQ(Step(0, g), w);
  EXPECT_EQ(client_->over_grpc.load(), 0);
  Ticket();  // another ticket for trainer 0: the lane's is revoked
  for (float& v : w) v -= 1;
  ASSERT_EQ(Step(1, g), w);                 // the push is applied once
  EXPECT_EQ(client_->over_grpc.load(), 2);  // the push again, and the pull
  EXPECT_EQ(params_->tcp_lane_servers(), 0);
  for (float& v : w) v -= 1;
  ASSERT_EQ(Step(2, g), w);
  EXPECT_EQ(client_->over_grpc.load(), 4);

  // A new lane, then the pserver's lane stops: again through gRPC.
  ASSERT_EQ(params_->UseTcpLane({}), 1);
  server_->tcp_lane()->Stop();
  for (float& v : w) v -= 1;
  ASSERT_EQ(Step(3, g), w);
  EXPECT_EQ(params_->tcp_lane_servers(), 0);
}

TEST_F(TcpLaneTest, APullThatWaitsItsLongestIsRetriedThroughGrpc) {
  Start(/*lane=*/true, /*max_pull_wait=*/absl::Milliseconds(100));
  ASSERT_EQ(params_->UseTcpLane({}), 1);
  // The pserver answers the lane's call DEADLINE_EXCEEDED after 100 ms,
  // and gRPC waits on for it.
  EXPECT_EQ(PullHeldPastItsWait(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_GE(client_->over_grpc.load(), 1);
  EXPECT_EQ(params_->tcp_lane_servers(), 1);  // the lane stays
}

TEST_F(TcpLaneTest, ABadHelloIsAnsweredAndClosed) {
  Start();
  absl::Status answer;
  tcp_lane::Hello wrong = HelloWith(Ticket());
  wrong.magic = 0x50545448;  // "HTTP"
  auto socket = Connect(wrong, &answer);
  EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  EXPECT_TRUE(absl::StrContains(answer.message(), "magic")) << answer;
  EXPECT_TRUE(absl::StartsWith(ReadAnswer(*socket, nullptr).message(), "io:"));

  socket = Connect(HelloWith(std::string(16, 'x')), &answer);
  EXPECT_EQ(answer.code(), absl::StatusCode::kPermissionDenied) << answer;
  EXPECT_TRUE(absl::StrContains(answer.message(), "unknown ticket"));

  // A ticket replaced by a later one.
  const std::string old = Ticket();
  Ticket();
  socket = Connect(HelloWith(old), &answer);
  EXPECT_EQ(answer.code(), absl::StatusCode::kPermissionDenied) << answer;
}

TEST_F(TcpLaneTest, HostileCallsOnAValidTicket) {
  Start();
  absl::Status answer;
  auto socket = Connect(HelloWith(Ticket()), &answer);
  ASSERT_TRUE(answer.ok()) << answer;

  // Another trainer's pull: refused, and the connection goes on.
  SendCall(*socket, tcp_lane::kPull, PullOf(/*trainer=*/1, 0, 0), 8);
  answer = ReadAnswer(*socket, nullptr);
  EXPECT_EQ(answer.code(), absl::StatusCode::kPermissionDenied) << answer;
  // A request that does not parse.
  SendCall(*socket, tcp_lane::kPull, std::string("\xff\xff\xff", 3), 8);
  answer = ReadAnswer(*socket, nullptr);
  EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  // A block past the values, and one at an offset that is no float's.
  SendCall(*socket, tcp_lane::kPull, PullOf(0, 1, 4), 8);
  answer = ReadAnswer(*socket, nullptr);
  EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  SendCall(*socket, tcp_lane::kPull, PullOf(0, 1, 2), 16);
  answer = ReadAnswer(*socket, nullptr);
  EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  // A push whose values are not finite.
  {
    PushRequest push;
    push.set_trainer_id(0);
    push.set_incarnation(3);
    push.set_request_id(77);
    DenseBlock* b = push.add_blocks();
    b->set_table_id(0);
    b->set_block(0);
    b->set_encoding(FLOAT32);
    SendCall(*socket, tcp_lane::kPush, push.SerializeAsString(), 8,
             {std::nanf(""), 1.0f});
    answer = ReadAnswer(*socket, nullptr);
    EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  }
  // A good pull still works on the same connection.
  SendCall(*socket, tcp_lane::kPull, PullOf(0, 2, 0), 8);
  std::vector<float> values;
  std::string reply;
  answer = ReadAnswer(*socket, &reply, &values);
  ASSERT_TRUE(answer.ok()) << answer;
  EXPECT_EQ(values, (std::vector<float>{5, 6}));

  // Out of bounds: answered, then closed.
  SendCall(*socket, tcp_lane::kPull, PullOf(0, 0, 0),
           tcp_lane::kMaxValueBytes + 4);
  answer = ReadAnswer(*socket, nullptr);
  EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  EXPECT_TRUE(absl::StartsWith(ReadAnswer(*socket, nullptr).message(), "io:"));
  socket = Connect(HelloWith(Ticket()), &answer);
  ASSERT_TRUE(answer.ok()) << answer;
  SendCall(*socket, /*method=*/static_cast<tcp_lane::Method>(9), "", 0);
  answer = ReadAnswer(*socket, nullptr);
  EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
  EXPECT_TRUE(absl::StartsWith(ReadAnswer(*socket, nullptr).message(), "io:"));
}

TEST_F(TcpLaneTest, EncodingsAndOffsetsTheLaneDoesNotCarry) {
  Start();
  absl::Status answer;
  auto socket = Connect(HelloWith(Ticket()), &answer);
  ASSERT_TRUE(answer.ok()) << answer;
  // Threshold messages stay on gRPC.
  {
    PullRequest pull;
    pull.ParseFromString(PullOf(0, 0, 0));
    pull.set_encoding(THRESHOLD);
    SendCall(*socket, tcp_lane::kPull, pull.SerializeAsString(), 8);
    answer = ReadAnswer(*socket, nullptr);
    EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
    EXPECT_TRUE(absl::StrContains(answer.message(), "threshold")) << answer;
  }
  // 16-bit push blocks out of order, or past the values.
  for (uint64_t first : {uint64_t{2}, uint64_t{0}}) {
    PushRequest push;
    push.set_trainer_id(0);
    push.set_incarnation(3);
    push.set_request_id(78 + first);
    for (uint32_t block : {0u, 1u}) {
      DenseBlock* b = push.add_blocks();
      b->set_table_id(0);
      b->set_block(block);
      b->set_encoding(BFLOAT16);
      b->set_shared_offset(block == 0 ? first : 12);
    }
    SendCall(*socket, tcp_lane::kPush, push.SerializeAsString(), 8,
             {0.0f, 0.0f});
    answer = ReadAnswer(*socket, nullptr);
    EXPECT_EQ(answer.code(), absl::StatusCode::kInvalidArgument) << answer;
    EXPECT_TRUE(absl::StrContains(answer.message(), "lies at bytes")) << answer;
  }
  // The connection goes on.
  SendCall(*socket, tcp_lane::kPull, PullOf(0, 2, 0), 8);
  std::vector<float> values;
  answer = ReadAnswer(*socket, nullptr, &values);
  ASSERT_TRUE(answer.ok()) << answer;
  EXPECT_EQ(values, (std::vector<float>{5, 6}));
}

TEST_F(TcpLaneTest, TooManyConnectionsOfOneTicket) {
  Start();
  const std::string ticket = Ticket();
  std::vector<std::unique_ptr<TcpLaneSocket>> open;
  absl::Status answer;
  for (int i = 0; i < 8; ++i) {
    open.push_back(Connect(HelloWith(ticket), &answer));
    ASSERT_TRUE(answer.ok()) << i << ": " << answer;
  }
  auto ninth = Connect(HelloWith(ticket), &answer);
  EXPECT_EQ(answer.code(), absl::StatusCode::kResourceExhausted) << answer;
}

TEST_F(TcpLaneTest, OpenTcpLaneRefusals) {
  Start(/*lane=*/false);
  EXPECT_EQ(server_->tcp_lane_port(), 0);
  TcpLaneRequest req;
  req.set_trainer_id(0);
  req.set_incarnation(3);
  TcpLaneResponse resp;
  absl::Status s = grpc_->OpenTcpLane(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--tcp_lane=false")) << s;
  EXPECT_EQ(params_->UseTcpLane({}), 0);
  EXPECT_TRUE(Step(0, {0, 0, 0, 0, 0, 0}) == w_);
}

TEST_F(TcpLaneTest, OpenTcpLaneChecksTheTrainer) {
  Start();
  TcpLaneRequest req;
  req.set_trainer_id(4);
  req.set_incarnation(3);
  TcpLaneResponse resp;
  absl::Status s = grpc_->OpenTcpLane(req, &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(resp.ticket().empty());
}

}  // namespace
}  // namespace shardps
