// ParamClient's shared-memory lane against in-process pservers: values go
// through the regions, and a pserver that no longer holds a region (it was
// restarted, or the region replaced) gets the call again over TCP, applied
// once.
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transport/in_process_ps_client.h"
#include "gtest/gtest.h"
#include "pserver/service/call_table.h"
#include "pserver/service/pserver.h"
#include "pserver/testing/store_testing.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"

namespace shardps {
namespace {

class SharedMemoryTest : public ::testing::Test {
 protected:
  // Two pservers, table "w" of 6 values in blocks of 2, SGD lr 1, one
  // trainer: a pull after a push of g reads w - g.
  void SetUp() override {
    for (int s = 0; s < 2; ++s) {
      servers_.push_back(std::move(*Pserver::Create(PserverOptions{})));
      ASSERT_TRUE(servers_.back()->Start().ok());
      targets_.push_back(
          std::make_unique<SingleJobTarget>(servers_.back()->handler()));
      clients_.push_back(std::make_unique<InProcessPsClient>(
          targets_.back().get(), absl::StrCat("pserver-", s)));
      ptrs_.push_back(clients_.back().get());
    }
    jobs_ = std::make_unique<JobClient>(ptrs_, &stamp_);
    ASSERT_TRUE(jobs_->Register().ok());
    const JobSpec job = testing::MakeJobSpec(
        SYNC, 1, {testing::DenseTableSpec("w", 6, 2, testing::Sgd(1.0f))});
    params_ = std::make_unique<ParamClient>(
        ptrs_, &stamp_, std::vector<DenseTableLayout>{{"w", 6, 2}});
    ASSERT_TRUE(jobs_->InitJob(job, params_->chunks(), {w_.data()}).ok());
    ASSERT_TRUE(jobs_->WaitUntilReady(job, absl::Seconds(5)).ok());
    ASSERT_TRUE(jobs_->Join().ok());
  }

  std::vector<float> PullAll(int64_t version) {
    std::vector<float> out(6);
    absl::Status s = params_->Pull(version, version, {out.data()}, nullptr);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  RequestStamp stamp_{0, /*incarnation=*/3};
  std::vector<float> w_ = {1, 2, 3, 4, 5, 6};
  std::vector<std::unique_ptr<Pserver>> servers_;
  std::vector<std::unique_ptr<SingleJobTarget>> targets_;
  std::vector<std::unique_ptr<InProcessPsClient>> clients_;
  std::vector<PsClientInterface*> ptrs_;
  std::unique_ptr<JobClient> jobs_;
  std::unique_ptr<ParamClient> params_;
};

TEST_F(SharedMemoryTest, ValuesGoThroughTheRegions) {
  ASSERT_EQ(params_->UseSharedMemory(), 2);
  EXPECT_EQ(PullAll(0), w_);
  const std::vector<float> g = {1, 1, 1, 1, 1, 1};
  ASSERT_TRUE(params_->Push(0, {g.data()}, nullptr).ok());
  EXPECT_EQ(PullAll(1), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(params_->shared_servers(), 2);
}

TEST_F(SharedMemoryTest, ALostRegionSendsTheCallAgainOverTcpOnce) {
  ASSERT_EQ(params_->UseSharedMemory(), 2);
  // Pserver 1 replaces the trainer's region (as a restarted one holds
  // none): the lane's id is unknown there from now on.
  SharedMemoryRequest req;
  req.set_trainer_id(0);
  req.set_incarnation(3);
  req.set_bytes(128);
  SharedMemoryResponse resp;
  ASSERT_TRUE(servers_[1]->handler()->OpenSharedMemory(req, &resp).ok());
  const std::vector<float> g = {1, 1, 2, 2, 3, 3};
  ASSERT_TRUE(params_->Push(0, {g.data()}, nullptr).ok());
  // Applied once on each pserver (SGD lr 1): pserver 1's blocks too.
  EXPECT_EQ(PullAll(1), (std::vector<float>{0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(params_->shared_servers(), 1);
  ASSERT_TRUE(params_->Push(1, {g.data()}, nullptr).ok());
  EXPECT_EQ(PullAll(2), (std::vector<float>{-1, 0, -1, 0, -1, 0}));
  // A new UseSharedMemory opens both again.
  EXPECT_EQ(params_->UseSharedMemory(), 2);
  EXPECT_EQ(PullAll(2), (std::vector<float>{-1, 0, -1, 0, -1, 0}));
}

TEST_F(SharedMemoryTest, ThresholdPushesGoOverTcpAndPullsThroughTheRegion) {
  ThresholdPushEncoder::Options o;
  o.adaptive = false;
  o.threshold = 0.5;
  params_->set_threshold_compression(o);
  ASSERT_EQ(params_->UseSharedMemory(), 2);  // for pulls only
  const std::vector<float> g(6, 1.0f);
  ASSERT_TRUE(params_->Push(0, {g.data()}, nullptr).ok());
  // Each value sent as +0.5 (the rest kept as residual), SGD lr 1.
  EXPECT_EQ(PullAll(1), (std::vector<float>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}));
  EXPECT_EQ(params_->shared_servers(), 2);
}

TEST_F(SharedMemoryTest, CompressedValuesStayOnTcp) {
  params_->set_encodings(FLOAT16, FLOAT16);
  EXPECT_EQ(params_->UseSharedMemory(), 0);
  EXPECT_EQ(PullAll(0), w_);
}

}  // namespace
}  // namespace shardps
