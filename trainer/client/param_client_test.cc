#include "trainer/client/param_client.h"

#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/transport/wire_limits.h"
#include "gtest/gtest.h"
#include "trainer/transport/testing/fake_ps_client.h"

namespace shardps {
namespace {

// An in-memory pserver: remembers pushed values per block, returns them on
// pulls. Enough to check that ParamClient splits and reassembles.
class FakeServer : public testing::FakePsClient {
 public:
  explicit FakeServer(std::string name) : FakePsClient(std::move(name)) {}
  void PullAsync(const PullRequest& req, PullResponse* resp,
                 StatusCallback done) override {
    // Answer from another thread, as gRPC does. After `done` the test may
    // destroy this server, so nothing of it is touched then.
    std::thread([this, &req, resp, done] {
      {
        absl::MutexLock l(&mu_);
        for (const BlockRef& r : req.blocks()) {
          DenseBlock* b = resp->add_blocks();
          b->set_table_id(r.table_id());
          b->set_block(r.block());
          b->set_values(blocks_[{r.table_id(), r.block()}]);
        }
        ++pulls;
      }
      done(absl::OkStatus());
    }).detach();
  }
  void PushAsync(const PushRequest& req, PushResponse*,
                 StatusCallback done) override {
    absl::MutexLock l(&mu_);
    request_ids.insert(req.request_id());
    ++pushes;
    for (const auto& b : req.blocks()) {
      blocks_[{b.table_id(), b.block()}] = b.values();
    }
    done(absl::OkStatus());
  }
  int pushes = 0, pulls = 0;
  std::set<uint64_t> request_ids;

 private:
  absl::Mutex mu_;
  std::map<std::pair<uint32_t, uint32_t>, std::string> blocks_;
};

TEST(ParamClientTest, PushThenPullRoundTripsThroughChunks) {
  FakeServer a("a"), b("b");
  // 2.5M floats = 10 MB: several chunks per server.
  std::vector<DenseTableLayout> layout = {{"w", 2'500'000, 65536},
                                          {"b", 7, 65536}};
  RequestStamp stamp(0);
  ParamClient client({&a, &b}, &stamp, layout);
  std::vector<float> w(2'500'000), bias(7);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = -1.0f * i;
  TransferStats push_stats;
  ASSERT_TRUE(client.Push(3, {w.data(), bias.data()}, &push_stats).ok());
  EXPECT_GE(push_stats.bytes, int64_t{4 * 2'500'007});
  EXPECT_GE(push_stats.rpcs, 4);
  EXPECT_EQ(a.request_ids.size() + b.request_ids.size(),
            static_cast<size_t>(push_stats.rpcs));  // a fresh id per call
  std::vector<float> w2(w.size()), bias2(bias.size());
  TransferStats pull_stats;
  ASSERT_TRUE(client.Pull(0, 0, {w2.data(), bias2.data()}, &pull_stats).ok());
  EXPECT_EQ(w2, w);
  EXPECT_EQ(bias2, bias);
  EXPECT_EQ(pull_stats.rpcs, push_stats.rpcs);
}

TEST(ParamClientTest, MismatchedPullReplyIsDataLoss) {
  class Liar : public FakeServer {
   public:
    Liar() : FakeServer("liar") {}
    void PullAsync(const PullRequest& req, PullResponse* resp,
                   StatusCallback done) override {
      DenseBlock* b = resp->add_blocks();
      b->set_table_id(0);
      b->set_block(0);
      b->set_values(std::string(3, 'x'));
      done(absl::OkStatus());
    }
  } liar;
  RequestStamp stamp(0);
  ParamClient client({&liar}, &stamp, {{"w", 4, 4}});
  std::vector<float> w(4);
  EXPECT_EQ(client.Pull(0, 0, {w.data()}, nullptr).code(),
            absl::StatusCode::kDataLoss);
}

// A pserver holding LARS blocks that took over a shard after a failover:
// its first norms push of the step comes before the step is assembled
// again and is refused; the trainer then waits with a norms pull and sends
// the norms again.
class ReassemblingServer : public testing::FakePsClient {
 public:
  ReassemblingServer() : FakePsClient("new primary") {}
  void PullAsync(const PullRequest& req, PullResponse* resp,
                 StatusCallback done) override {
    {
      absl::MutexLock l(&mu_);
      ++norms_pulls;
      assembled = norms_pulls >= 2;  // the pushes came again meanwhile
    }
    for (const BlockRef& r : req.blocks()) {
      BlockNorms* n = resp->add_norms();
      n->set_table_id(r.table_id());
      n->set_block(r.block());
      n->set_weights(4);
      n->set_gradient(1);
    }
    done(absl::OkStatus());
  }
  void PushAsync(const PushRequest& req, PushResponse*,
                 StatusCallback done) override {
    absl::Status s;
    {
      absl::MutexLock l(&mu_);
      norms_pushes.push_back(req);
      if (!assembled) {
        s = absl::FailedPreconditionError(
            "table w block 0: the trust ratio of step 5 came at version 5 "
            "(step not assembled yet)");
      }
    }
    done(s);
  }
  absl::Mutex mu_;
  int norms_pulls = 0;
  bool assembled = false;
  std::vector<PushRequest> norms_pushes;
};

TEST(ParamClientTest, LarsNormsWaitForAStepAssembledAgain) {
  ReassemblingServer server;
  RequestStamp stamp(0);
  ParamClient client({&server}, &stamp, {{"w", 6, 4}});
  ASSERT_TRUE(client.ExchangeTableNorms(5, {true}).ok());
  absl::MutexLock l(&server.mu_);
  EXPECT_EQ(server.norms_pulls, 2);  // the step's, then the wait
  ASSERT_EQ(server.norms_pushes.size(), 2u);
  const TableNorms& n = server.norms_pushes[1].table_norms(0);
  EXPECT_EQ(n.weights(), std::sqrt(8.0));  // 4 + 4 over both blocks
  EXPECT_EQ(n.gradient(), std::sqrt(2.0));
  EXPECT_EQ(n.blocks_size(), 2);  // the blocks the norms are for
  EXPECT_NE(server.norms_pushes[0].request_id(),
            server.norms_pushes[1].request_id());
}

TEST(ParamClientTest, LarsNormsRefusedForAnotherReasonFail) {
  class Refusing : public testing::FakePsClient {
   public:
    Refusing() : FakePsClient("refusing") {}
    void PullAsync(const PullRequest& req, PullResponse* resp,
                   StatusCallback done) override {
      for (const BlockRef& r : req.blocks()) {
        BlockNorms* n = resp->add_norms();
        n->set_table_id(r.table_id());
        n->set_block(r.block());
      }
      done(absl::OkStatus());
    }
    void PushAsync(const PushRequest&, PushResponse*,
                   StatusCallback done) override {
      ++pushes;
      done(absl::FailedPreconditionError("no table 0 here"));
    }
    int pushes = 0;
  } server;
  RequestStamp stamp(0);
  ParamClient client({&server}, &stamp, {{"w", 6, 4}});
  absl::Status s = client.ExchangeTableNorms(5, {true});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_EQ(server.pushes, 1);  // not sent again
}

}  // namespace
}  // namespace shardps
