#ifndef SHARDPS_TESTS_CLIENT_SERVER_GRPC_ONE_TABLE_H_
#define SHARDPS_TESTS_CLIENT_SERVER_GRPC_ONE_TABLE_H_

// A pserver served over gRPC in the test's process, with one sync job of
// one trainer and table "w" (6 values in blocks of 2, SGD lr 1: a pull
// after a push of g reads w - g), reached through a client that counts the
// pushes and pulls that go over gRPC: for the tests of the transports
// beside gRPC (shared calls, the TCP lane), which check what did not.

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pserver/server/grpc_server.h"
#include "pserver/testing/store_testing.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"
#include "trainer/transport/grpc_ps_client.h"

namespace shardps {
namespace testing {

// Forwards to a client and counts the pushes and pulls that reach gRPC.
class CountingClient final : public PsClientInterface {
 public:
  explicit CountingClient(PsClientInterface* inner) : inner_(inner) {}
  const std::string& address() const override { return inner_->address(); }
  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    if (rpc == PsRpc::kPush || rpc == PsRpc::kPull) ++over_grpc;
    inner_->CallAsync(rpc, req, resp, std::move(done));
  }
  void PushDenseAsync(const DensePush& push, PushResponse* resp,
                      StatusCallback done) override {
    ++over_grpc;
    inner_->PushDenseAsync(push, resp, std::move(done));
  }
  std::atomic<int> over_grpc{0};

 private:
  PsClientInterface* const inner_;
};

class GrpcOneTableTest : public ::testing::Test {
 protected:
  // Starts the pserver on 127.0.0.1 with `opts` (host and port set here),
  // and trainer 0 (incarnation 3) joins the job.
  void Start(GrpcServerOptions opts) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    auto server = GrpcPsServer::Create(opts);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_TRUE(server_->Start().ok());
    grpc_ = GrpcPsClient::Create(absl::StrCat("127.0.0.1:", server_->port()),
                                 RpcOptions{}, &timer_);
    client_ = std::make_unique<CountingClient>(grpc_.get());
    jobs_ = std::make_unique<JobClient>(
        std::vector<PsClientInterface*>{client_.get()}, &stamp_);
    ASSERT_TRUE(jobs_->Register().ok());
    const JobSpec job =
        MakeJobSpec(SYNC, 1, {DenseTableSpec("w", 6, 2, Sgd(1.0f))});
    params_ = std::make_unique<ParamClient>(
        std::vector<PsClientInterface*>{client_.get()}, &stamp_,
        std::vector<DenseTableLayout>{{"w", 6, 2}});
    ASSERT_TRUE(jobs_->InitJob(job, params_->chunks(), {w_.data()}).ok());
    ASSERT_TRUE(jobs_->WaitUntilReady(job, absl::Seconds(5)).ok());
    ASSERT_TRUE(jobs_->Join().ok());
  }

  // Pushes g for `step` and pulls the version after it.
  std::vector<float> Step(int64_t step, const std::vector<float>& g) {
    absl::Status s = params_->Push(step, {g.data()}, nullptr);
    EXPECT_TRUE(s.ok()) << s;
    std::vector<float> out(6);
    s = params_->Pull(step + 1, step + 1, {out.data()}, nullptr);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // A pull of version 1 started before the push of step 0 (ones), which
  // comes 400 ms later; the pulled values (w - 1 when the pull succeeds).
  // With a --max_pull_wait below that, the pserver answers the first try
  // DEADLINE_EXCEEDED.
  std::vector<float> PullHeldPastItsWait() {
    std::vector<float> out(6);
    std::unique_ptr<Transfer> pull =
        params_->StartPull(/*min_version=*/1, /*step=*/1, {out.data()});
    absl::SleepFor(absl::Milliseconds(400));
    const std::vector<float> g = {1, 1, 1, 1, 1, 1};
    absl::Status s = params_->Push(0, {g.data()}, nullptr);
    EXPECT_TRUE(s.ok()) << s;
    s = pull->Wait(nullptr);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  RetryTimer timer_;
  RequestStamp stamp_{0, /*incarnation=*/3};
  std::vector<float> w_ = {1, 2, 3, 4, 5, 6};
  std::unique_ptr<GrpcPsServer> server_;
  std::unique_ptr<GrpcPsClient> grpc_;
  std::unique_ptr<CountingClient> client_;
  std::unique_ptr<JobClient> jobs_;
  std::unique_ptr<ParamClient> params_;
};

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_TESTS_CLIENT_SERVER_GRPC_ONE_TABLE_H_
