// The server around the binding: gRPC's health service while the pserver
// starts and serves, and /metrics over HTTP counting real calls.
#include "pserver/server/grpc_server.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/storage/env.h"
#include "common/testing/http_get.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/ps_service.grpc.pb.h"

namespace shardps {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

// Holds the first GetChildren (the start's look at --checkpoint_dir) until
// released: a pserver that takes long to load its checkpoints.
class SlowStartEnv : public EnvWrapper {
 public:
  SlowStartEnv() : EnvWrapper(Env::Default()) {}
  absl::Status GetChildren(const std::string& dir,
                           std::vector<std::string>* children) override {
    if (!held_.exchange(true)) release.WaitForNotification();
    return EnvWrapper::GetChildren(dir, children);
  }
  absl::Notification release;

 private:
  std::atomic<bool> held_{false};
};

HealthCheckResponse::ServingStatus Health(int port) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.status();
}

grpc::Status GetStatus(int port, GetStatusResponse* resp) {
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return stub->GetStatus(&ctx, GetStatusRequest(), resp);
}

GrpcServerOptions Loopback() {
  GrpcServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  return o;
}

TEST(GrpcPsServerTest, HealthIsNotServingUntilTheCheckpointsAreLoaded) {
  testing::ScopedTempDir tmp("grpc_server_health");
  SlowStartEnv env;
  GrpcServerOptions o = Loopback();
  o.pserver.checkpoint_dir = tmp.Path("ckpt");
  o.pserver.env = &env;
  auto server = GrpcPsServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::Status started = absl::UnknownError("not yet");
  std::thread start([&] { started = (*server)->Start(); });
  while ((*server)->port() == 0) absl::SleepFor(absl::Milliseconds(5));
  const int port = (*server)->port();
  // Bound, loading: the health service answers NOT_SERVING and every call
  // UNAVAILABLE (which trainers retry).
  EXPECT_EQ(Health(port), HealthCheckResponse::NOT_SERVING);
  GetStatusResponse resp;
  grpc::Status s = GetStatus(port, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("loading its checkpoints"));

  env.release.Notify();
  start.join();
  ASSERT_TRUE(started.ok()) << started;
  EXPECT_EQ(Health(port), HealthCheckResponse::SERVING);
  EXPECT_TRUE(GetStatus(port, &resp).ok());
  (*server)->Shutdown();
}

TEST(GrpcPsServerTest, MetricsCountTheCallsServed) {
  GrpcServerOptions o = Loopback();
  o.monitoring.host = "127.0.0.1";
  o.monitoring.port = 0;
  auto server = GrpcPsServer::Create(o);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Start().ok());
  const int port = (*server)->port();
  GetStatusResponse resp;
  ASSERT_TRUE(GetStatus(port, &resp).ok());
  ASSERT_TRUE(GetStatus(port, &resp).ok());
  // An empty push before the job exists: refused, and counted by its code.
  auto stub = ParameterServer::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  PushRequest push;
  push.set_trainer_id(0);
  push.set_step(0);
  PushResponse pushed;
  const grpc::Status s = stub->Push(&ctx, push, &pushed);
  ASSERT_FALSE(s.ok());
  const std::string code =
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()));

  const std::string page =
      testing::HttpGet((*server)->monitoring_port(), "/metrics");
  EXPECT_THAT(page, HasSubstr("shardps_pserver_rpcs_total{code=\"OK\","
                              "method=\"GetStatus\"} 2\n"));
  EXPECT_THAT(page, HasSubstr(absl::StrCat("shardps_pserver_rpcs_total{code=\"",
                                           code, "\",method=\"Push\"} 1\n")));
  EXPECT_THAT(page, HasSubstr(absl::StrCat(
                        "shardps_pserver_received_bytes_total{method=\"Push"
                        "\"} ",
                        push.ByteSizeLong(), "\n")));
  EXPECT_THAT(page, HasSubstr("shardps_pserver_rpc_duration_seconds_count{"
                              "method=\"GetStatus\"} 2\n"));
  EXPECT_THAT(page, HasSubstr("shardps_pserver_jobs 1\n"));
  (*server)->Shutdown();
}

}  // namespace
}  // namespace shardps
