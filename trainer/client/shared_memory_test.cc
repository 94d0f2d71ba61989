// ParamClient's shared-memory lane (SharedMemoryPsClient) against
// in-process pservers: values go through the regions, only offsets in the
// messages, and a pserver that no longer holds a region (it was
// restarted, or the region replaced) gets the call again over TCP, applied
// once.
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/in_process_ps_client.h"
#include "gtest/gtest.h"
#include "pserver/server/call_table.h"
#include "pserver/server/pserver.h"
#include "pserver/testing/store_testing.h"
#include "trainer/client/job_client.h"
#include "trainer/client/param_client.h"

namespace shardps {
namespace {

// A pserver's client that records the dense pushes and pulls it is given
// (what SharedMemoryPsClient sends on), and forwards every call.
class RecordingClient : public PsClientInterface {
 public:
  explicit RecordingClient(PsClientInterface* inner) : inner_(inner) {}
  const std::string& address() const override { return inner_->address(); }
  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    if (rpc == PsRpc::kPull) {
      absl::MutexLock l(&mu_);
      pulls_.push_back(static_cast<const PullRequest&>(req));
    }
    inner_->CallAsync(rpc, req, resp, std::move(done));
  }
  void PushDenseAsync(const DensePush& push, PushResponse* resp,
                      StatusCallback done) override {
    {
      absl::MutexLock l(&mu_);
      pushes_.push_back(ToPushRequest(push));
    }
    inner_->PushDenseAsync(push, resp, std::move(done));
  }
  std::vector<PushRequest> pushes() const {
    absl::MutexLock l(&mu_);
    return pushes_;
  }
  std::vector<PullRequest> pulls() const {
    absl::MutexLock l(&mu_);
    return pulls_;
  }

 private:
  PsClientInterface* const inner_;
  mutable absl::Mutex mu_;
  std::vector<PushRequest> pushes_ ABSL_GUARDED_BY(mu_);
  std::vector<PullRequest> pulls_ ABSL_GUARDED_BY(mu_);
};

// Whether every block of `req` names its place in a shared region and
// carries no values.
template <typename Request>
bool ThroughTheRegion(const Request& req) {
  if (req.shared_region() == 0 || req.blocks_size() == 0) return false;
  for (const auto& b : req.blocks()) {
    if (b.shared_offset() == 0) return false;
    if constexpr (std::is_same_v<Request, PushRequest>) {
      if (!b.values().empty()) return false;
    }
  }
  return true;
}

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
      recorders_.push_back(
          std::make_unique<RecordingClient>(clients_.back().get()));
      ptrs_.push_back(recorders_.back().get());
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
  std::vector<std::unique_ptr<RecordingClient>> recorders_;
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
  // Only offsets in the messages each pserver got.
  for (const auto& r : recorders_) {
    ASSERT_EQ(r->pushes().size(), 1u);
    EXPECT_TRUE(ThroughTheRegion(r->pushes()[0]));
    ASSERT_EQ(r->pulls().size(), 2u);
    for (const PullRequest& p : r->pulls()) EXPECT_TRUE(ThroughTheRegion(p));
  }
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
  ASSERT_TRUE(servers_[1]->handler()->shared_regions().Open(req, &resp).ok());
  const std::vector<float> g = {1, 1, 2, 2, 3, 3};
  ASSERT_TRUE(params_->Push(0, {g.data()}, nullptr).ok());
  // Applied once on each pserver (SGD lr 1): pserver 1's blocks too.
  EXPECT_EQ(PullAll(1), (std::vector<float>{0, 1, 1, 2, 2, 3}));
  EXPECT_EQ(params_->shared_servers(), 1);
  // Pserver 1 got the push through the region, then in the message under
  // another id; the pull went in the message at once.
  const std::vector<PushRequest> pushes = recorders_[1]->pushes();
  ASSERT_EQ(pushes.size(), 2u);
  EXPECT_TRUE(ThroughTheRegion(pushes[0]));
  EXPECT_EQ(pushes[1].shared_region(), 0u);
  EXPECT_EQ(pushes[1].blocks(0).values().size(), 2 * sizeof(float));
  EXPECT_NE(pushes[1].request_id(), pushes[0].request_id());
  EXPECT_EQ(recorders_[1]->pulls().back().shared_region(), 0u);
  EXPECT_TRUE(ThroughTheRegion(recorders_[0]->pulls().back()));
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
