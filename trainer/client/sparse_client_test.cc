// Sparse pulls and pushes through SparseClient against in-process pservers:
// keys split by Mix64(key) % P, chunked at 4 MiB, the sync mean per key over
// the trainers that pushed it.
#include "trainer/client/sparse_client.h"

#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/transport/in_process_ps_client.h"
#include "gtest/gtest.h"
#include "pserver/server/call_table.h"
#include "pserver/server/pserver.h"
#include "trainer/client/job_client.h"

namespace shardps {
namespace {

constexpr int kDim = 64;

class SparseClientTest : public ::testing::Test {
 protected:
  // With `bias_table`, a second table "bias" of 1 float per row (id 1).
  void Start(int num_servers, int num_trainers, bool bias_table = false) {
    JobSpec job;
    job.set_mode(SYNC);
    job.set_num_trainers(num_trainers);
    job.set_max_staleness(-1);
    TableSpec* e = job.add_tables();
    e->set_name("emb");
    e->set_kind(TableSpec::SPARSE);
    e->mutable_sparse()->set_dim(kDim);
    e->mutable_optimizer()->set_type(OptimizerConfig::SGD);
    e->mutable_optimizer()->set_learning_rate(1.0f);
    if (bias_table) {
      TableSpec* b = job.add_tables();
      *b = *e;
      b->set_name("bias");
      b->mutable_sparse()->set_dim(1);
    }
    job_ = job;
    for (int s = 0; s < num_servers; ++s) {
      servers_.push_back(std::move(*Pserver::Create(PserverOptions{})));
      ASSERT_TRUE(servers_.back()->Start().ok());
    }
    for (int k = 0; k < num_trainers; ++k) {
      std::vector<PsClientInterface*> ptrs;
      for (size_t s = 0; s < servers_.size(); ++s) {
        targets_.push_back(
            std::make_unique<SingleJobTarget>(servers_[s]->handler()));
        clients_.push_back(std::make_unique<InProcessPsClient>(
            targets_.back().get(), absl::StrCat("pserver-", s)));
        ptrs.push_back(clients_.back().get());
      }
      stamps_.push_back(std::make_unique<RequestStamp>(k));
      jobs_.push_back(std::make_unique<JobClient>(ptrs, stamps_.back().get()));
      sparse_.push_back(
          std::make_unique<SparseClient>(ptrs, stamps_.back().get()));
    }
    ASSERT_TRUE(jobs_[0]->InitJob(job_, ChunkPlan(num_servers), {}).ok());
    for (auto& j : jobs_) {
      ASSERT_TRUE(j->WaitUntilReady(job_, absl::Seconds(5)).ok());
    }
  }

  JobSpec job_;
  std::vector<std::unique_ptr<Pserver>> servers_;
  std::vector<std::unique_ptr<SingleJobTarget>> targets_;
  std::vector<std::unique_ptr<InProcessPsClient>> clients_;
  std::vector<std::unique_ptr<RequestStamp>> stamps_;
  std::vector<std::unique_ptr<JobClient>> jobs_;
  std::vector<std::unique_ptr<SparseClient>> sparse_;
};

TEST_F(SparseClientTest, SyncMeanPerKeyAcrossChunksAndServers) {
  Start(/*num_servers=*/2, /*num_trainers=*/2);
  // 40k keys of 64 floats: about 10 MB, several chunks per pserver.
  std::mt19937_64 rng(3);
  std::vector<std::vector<uint64_t>> keys(2);
  std::vector<std::vector<float>> grads(2);
  std::map<uint64_t, std::pair<double, int>> expect;  // sum of g[0], count
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < 40000; ++i) {
      // Half the keys shared by both trainers, half private.
      // Even i: a key of this trainer's own; odd i: shared by both.
      const uint64_t key = (i % 2 == 0) ? (rng() % (1ULL << 40)) : i * 7ULL;
      keys[k].push_back(key);
    }
    std::sort(keys[k].begin(), keys[k].end());
    keys[k].erase(std::unique(keys[k].begin(), keys[k].end()), keys[k].end());
    grads[k].resize(keys[k].size() * kDim);
    for (size_t i = 0; i < keys[k].size(); ++i) {
      const float g = static_cast<float>((keys[k][i] % 13) + k);
      std::fill(grads[k].begin() + i * kDim, grads[k].begin() + (i + 1) * kDim,
                g);
      expect[keys[k][i]].first += g;
      expect[keys[k][i]].second += 1;
    }
  }
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(2);
  std::vector<TransferStats> stats(2);
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      std::vector<SparseTransfer> t = {
          {0, kDim, keys[k], nullptr, grads[k].data()}};
      status[k] = sparse_[k]->Push(0, /*sync=*/true, t, &stats[k]);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  EXPECT_GE(stats[0].rpcs, 4);  // several chunks per pserver
  // Trainer 0 pulls every key after the step: row = -(mean over pushers).
  std::vector<uint64_t> all;
  for (const auto& [key, sc] : expect) all.push_back(key);
  std::vector<float> rows(all.size() * kDim, -1);
  std::vector<SparseTransfer> t = {{0, kDim, all, rows.data(), nullptr}};
  ASSERT_TRUE(sparse_[0]->Pull(1, 1, t, nullptr).ok());
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& [sum, count] = expect[all[i]];
    ASSERT_FLOAT_EQ(rows[i * kDim], static_cast<float>(-sum / count))
        << "key " << all[i];
    ASSERT_FLOAT_EQ(rows[i * kDim + kDim - 1], rows[i * kDim]);
  }
}

TEST_F(SparseClientTest, TrainerWithNoKeysStillCompletesTheStep) {
  Start(/*num_servers=*/3, /*num_trainers=*/2);
  std::vector<uint64_t> keys = {42};
  std::vector<float> g(kDim, 2.0f);
  std::vector<absl::Status> status(2);
  std::thread t0([&] {
    std::vector<SparseTransfer> t = {{0, kDim, keys, nullptr, g.data()}};
    status[0] = sparse_[0]->Push(0, true, t, nullptr);
  });
  std::thread t1([&] {
    std::vector<SparseTransfer> t = {{0, kDim, {}, nullptr, nullptr}};
    status[1] = sparse_[1]->Push(0, true, t, nullptr);  // empty chunks
  });
  t0.join();
  t1.join();
  ASSERT_TRUE(status[0].ok() && status[1].ok());
  std::vector<float> row(kDim);
  std::vector<SparseTransfer> t = {{0, kDim, keys, row.data(), nullptr}};
  ASSERT_TRUE(sparse_[1]->Pull(1, 1, t, nullptr).ok());
  EXPECT_FLOAT_EQ(row[0], -2.0f);  // only trainer 0 pushed key 42
}

// Two tables travel in one call per pserver; a pull of the next version
// sent before the pushes is answered with the rows they made.
TEST_F(SparseClientTest, TablesShareCallsAndPullsWaitForTheirVersion) {
  Start(/*num_servers=*/2, /*num_trainers=*/2, /*bias_table=*/true);
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 100; ++k) keys.push_back(k * 1000003);
  std::vector<float> emb(keys.size() * kDim, -1), bias(keys.size(), -1);
  std::vector<SparseTransfer> fetch = {{0, kDim, keys, emb.data(), nullptr},
                                       {1, 1, keys, bias.data(), nullptr}};
  std::unique_ptr<Transfer> next = sparse_[0]->StartPull(1, 1, fetch);
  EXPECT_FALSE(next->Done());  // no trainer has pushed step 0
  std::vector<float> g_emb(keys.size() * kDim, 4.0f), g_bias(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) g_bias[i] = static_cast<float>(i);
  std::vector<absl::Status> status(2);
  std::vector<TransferStats> stats(2);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      std::vector<SparseTransfer> t = {{0, kDim, keys, nullptr, g_emb.data()},
                                       {1, 1, keys, nullptr, g_bias.data()}};
      status[k] = sparse_[k]->Push(0, /*sync=*/true, t, &stats[k]);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  EXPECT_EQ(stats[0].rpcs, 2);  // one call per pserver for both tables
  TransferStats pulled;
  ASSERT_TRUE(next->Wait(&pulled).ok());
  EXPECT_EQ(pulled.rpcs, 2);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(emb[i * kDim], -4.0f) << i;  // SGD, lr 1, mean of 4 and 4
    ASSERT_EQ(bias[i], -static_cast<float>(i)) << i;
  }
  // A table of no keys adds no call.
  std::vector<SparseTransfer> one = {{0, kDim, keys, emb.data(), nullptr},
                                     {1, 1, {}, nullptr, nullptr}};
  ASSERT_TRUE(sparse_[1]->Pull(1, 1, one, &pulled).ok());
  EXPECT_EQ(pulled.rpcs, 2);
}

}  // namespace
}  // namespace shardps
