// GrpcPsClient::CancelCalls over real sockets: a call retrying against a
// pserver that is down, and a call a pserver holds without answering, both
// end at once with CANCELLED; a call started after the cancel goes ahead.
#include "trainer/transport/grpc_ps_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// A loopback port nothing listens on (bound, then closed).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

// Answers nothing until the client gives up (a pull held for a step that
// never comes).
class SilentService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { StartRead(&request_); }
      void OnReadDone(bool) override {}
      void OnCancel() override { Finish(grpc::Status::CANCELLED); }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer request_;
    };
    return new Reactor;
  }
};

struct Result {
  absl::Notification done;
  absl::Status status;
};

class GrpcPsClientCancelTest : public ::testing::Test {
 protected:
  std::unique_ptr<GrpcPsClient> Client(int port) {
    RpcOptions o;
    o.attempt_deadline = absl::Seconds(60);
    o.retry_budget = absl::Seconds(60);
    o.initial_backoff = absl::Milliseconds(20);
    o.max_backoff = absl::Milliseconds(200);
    return GrpcPsClient::Create(absl::StrCat("127.0.0.1:", port), o, &timer_);
  }
  std::unique_ptr<Result> Start(GrpcPsClient* c) {
    auto r = std::make_unique<Result>();
    Result* p = r.get();
    c->GetStatusAsync(req_, &resp_, [p](absl::Status s) {
      p->status = std::move(s);
      p->done.Notify();
    });
    return r;
  }

  // `r` has not ended after a second; CancelCalls ends it CANCELLED within
  // one more.
  static void ExpectCancelledAtOnce(GrpcPsClient* c, Result* r) {
    EXPECT_FALSE(r->done.WaitForNotificationWithTimeout(absl::Seconds(1)));
    const absl::Time t = absl::Now();
    c->CancelCalls();
    ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    EXPECT_LT(absl::Now() - t, absl::Seconds(1));
    EXPECT_EQ(r->status.code(), absl::StatusCode::kCancelled) << r->status;
  }

  RetryTimer timer_;
  const GetStatusRequest req_;  // kept by the calls until they end
  GetStatusResponse resp_;
};

TEST_F(GrpcPsClientCancelTest, RetryingCallEndsAtOnce) {
  auto client = Client(UnusedPort());
  // UNAVAILABLE, retried for up to 60 s.
  auto r = Start(client.get());
  ExpectCancelledAtOnce(client.get(), r.get());
  EXPECT_NE(r->status.message().find("GetStatus to pserver 127.0.0.1:"),
            std::string::npos)
      << r->status;
  // A call started after the cancel goes on retrying.
  auto later = Start(client.get());
  ExpectCancelledAtOnce(client.get(), later.get());
}

// A call waiting for its next attempt when its client is destroyed ends
// CANCELLED in the destructor, and its retry, due later on the timer that
// outlives the client, touches nothing (a trainer crashed at exit when a
// retry of a call to a killed pserver came due after its client was gone).
TEST_F(GrpcPsClientCancelTest, DestroyedClientEndsItsWaitingCalls) {
  auto client = Client(UnusedPort());
  auto r = Start(client.get());
  EXPECT_FALSE(r->done.WaitForNotificationWithTimeout(absl::Seconds(1)));
  client.reset();
  ASSERT_TRUE(r->done.HasBeenNotified());
  EXPECT_EQ(r->status.code(), absl::StatusCode::kCancelled) << r->status;
  // Past the longest back-off (200 ms): the retry came due, and found the
  // call ended.
  absl::SleepFor(absl::Milliseconds(500));
}

TEST_F(GrpcPsClientCancelTest, HeldCallEndsAtOnce) {
  SilentService service;
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto client = Client(port);
  auto r = Start(client.get());
  ExpectCancelledAtOnce(client.get(), r.get());
  server->Shutdown();
}

}  // namespace
}  // namespace shardps
