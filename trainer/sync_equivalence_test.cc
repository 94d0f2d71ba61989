// The sync equivalence of docs/design.md: N trainers with local batch b and
// record sharding, shuffling off, end with the same parameters as one trainer
// with batch N*b, up to float rounding. Pservers and trainers run in this
// process and talk through InProcessPsClient (the request handler, no gRPC).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/in_process_ps_client.h"
#include "gtest/gtest.h"
#include "pserver/server/call_table.h"
#include "pserver/server/pserver.h"
#include "trainer/model/model.h"
#include "trainer/model/saved_model.h"
#include "trainer/trainer.h"

namespace shardps {
namespace {

void PutBigEndian(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>(v >> shift));
  }
}

// Writes an IDX image file of `n` records of 4x4 pixels and a label file,
// with labels that depend on the pixels (so the model learns something).
void WriteData(const std::string& dir, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string img, lab;
  PutBigEndian(0x00000803, &img);
  PutBigEndian(n, &img);
  PutBigEndian(4, &img);
  PutBigEndian(4, &img);
  PutBigEndian(0x00000801, &lab);
  PutBigEndian(n, &lab);
  for (int r = 0; r < n; ++r) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) {
      const int px = static_cast<int>(rng() % 256);
      sum += i < 8 ? px : 0;
      img.push_back(static_cast<char>(px));
    }
    lab.push_back(static_cast<char>((sum / 256) % 3));
  }
  std::ofstream(dir + "/images", std::ios::binary) << img;
  std::ofstream(dir + "/labels", std::ios::binary) << lab;
}

ModelConfig SmallModel(const std::string& dir) {
  ModelConfig c;
  auto* fc1 = c.add_layers();
  fc1->set_name("fc1");
  fc1->set_type(LayerConfig::FULLY_CONNECTED);
  fc1->set_output_dim(12);
  c.add_layers()->set_type(LayerConfig::TANH);
  auto* fc2 = c.add_layers();
  fc2->set_name("fc2");
  fc2->set_type(LayerConfig::FULLY_CONNECTED);
  fc2->set_output_dim(3);
  c.mutable_loss()->set_type(LossConfig::SOFTMAX_CROSS_ENTROPY);
  c.mutable_optimizer()->set_type(OptimizerConfig::MOMENTUM);
  c.mutable_optimizer()->set_learning_rate(0.1f);
  c.mutable_optimizer()->set_momentum(0.9f);
  c.mutable_data()->set_train_images(dir + "/images");
  c.mutable_data()->set_train_labels(dir + "/labels");
  c.mutable_data()->set_test_images(dir + "/images");
  c.mutable_data()->set_test_labels(dir + "/labels");
  c.set_block_size(40);  // several blocks per table, spread over pservers
  c.set_seed(7);
  return c;
}

// Starts `num_servers` in-process pservers for a job of `num_trainers`.
std::vector<std::unique_ptr<Pserver>> StartPservers(int num_servers,
                                                    int num_trainers) {
  std::vector<std::unique_ptr<Pserver>> servers;
  for (int s = 0; s < num_servers; ++s) {
    PserverOptions o;
    o.store.num_trainers = num_trainers;
    servers.push_back(std::move(*Pserver::Create(o)));
    EXPECT_TRUE(servers.back()->Start().ok());
  }
  return servers;
}

// The targets of the pservers' handlers, and each trainer's clients of them
// (clients[k][s]: trainer k's of pserver s).
struct JobClients {
  std::vector<std::unique_ptr<SingleJobTarget>> targets;
  std::vector<std::vector<std::unique_ptr<InProcessPsClient>>> clients;
};

// In-process clients of `servers` for each of `num_trainers` trainers.
JobClients ConnectTrainers(const std::vector<std::unique_ptr<Pserver>>& servers,
                           int num_trainers) {
  JobClients job;
  for (auto& server : servers) {
    job.targets.push_back(std::make_unique<SingleJobTarget>(server->handler()));
  }
  job.clients.resize(num_trainers);
  for (int k = 0; k < num_trainers; ++k) {
    for (size_t s = 0; s < servers.size(); ++s) {
      job.clients[k].push_back(std::make_unique<InProcessPsClient>(
          job.targets[s].get(), "in-process-" + std::to_string(s)));
    }
  }
  return job;
}

// The parameters the chief saved in `save_dir`, table by table.
std::vector<std::vector<float>> SavedParams(const std::string& dir,
                                            const std::string& save_dir) {
  auto model = Model::Create(SmallModel(dir), 16, 3);
  EXPECT_TRUE(model.ok());
  EXPECT_TRUE(LoadModelParams(save_dir, &(*model)->tables()).ok());
  std::vector<std::vector<float>> out;
  for (const auto& t : (*model)->tables()) out.push_back(t.value);
  return out;
}

// Runs a job of `num_trainers` trainers with local batch `batch` on
// `num_servers` in-process pservers; returns the final parameters.
std::vector<std::vector<float>> RunJob(
    const std::string& dir, int num_servers, int num_trainers, int batch,
    int num_passes, int64_t max_steps, const std::string& save_dir,
    bool overlap = true, bool async_prefetch = false, bool shared_memory = true,
    bool async = false, bool layer_pipeline = false, bool lars = false) {
  std::vector<std::unique_ptr<Pserver>> servers =
      StartPservers(num_servers, num_trainers);
  std::vector<absl::Status> status(num_trainers);
  std::vector<std::thread> threads;
  // All clients exist before any thread runs; they outlive the threads.
  const JobClients job = ConnectTrainers(servers, num_trainers);
  for (int k = 0; k < num_trainers; ++k) {
    threads.emplace_back([&, k] {
      TrainerOptions o;
      o.trainer_id = k;
      o.num_trainers = num_trainers;
      o.config = SmallModel(dir);
      if (lars) {
        // LARS: the table norms meet through the trainers each step.
        OptimizerConfig* opt = o.config.mutable_optimizer();
        opt->set_type(OptimizerConfig::LARS);
        opt->set_learning_rate(1.0f);
        opt->set_trust_coefficient(0.01f);
        opt->set_weight_decay(1e-4f);
      }
      o.mode = async || async_prefetch ? ASYNC : SYNC;
      o.async_prefetch = async_prefetch;
      o.batch_size = batch;
      o.num_passes = num_passes;
      o.max_steps = max_steps;
      o.save_dir = k == 0 ? save_dir : "";
      o.overlap = overlap;
      o.async_overlap = overlap && async;
      o.shared_memory = shared_memory;
      o.layer_pipeline = layer_pipeline;
      std::vector<PsClientInterface*> ptrs;
      for (auto& c : job.clients[k]) ptrs.push_back(c.get());
      Trainer t(o, ptrs);
      status[k] = t.Run();
      // In one process, /proc/self/fd always opens.
      EXPECT_EQ(t.result().shared_memory_servers,
                shared_memory ? num_servers : 0);
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < num_trainers; ++k) {
    EXPECT_TRUE(status[k].ok()) << "trainer " << k << ": " << status[k];
  }
  return SavedParams(dir, save_dir);
}

// `many` (N trainers) ends where `one` does, to float rounding, and
// training moved the parameters.
void ExpectSameTraining(const std::string& dir,
                        const std::vector<std::vector<float>>& one,
                        const std::vector<std::vector<float>>& many, int n) {
  ASSERT_EQ(one.size(), many.size());
  double max_diff = 0, max_change = 0;
  auto init = Model::Create(SmallModel(dir), 16, 3);
  (*init)->InitializeParameters(7);
  for (size_t t = 0; t < one.size(); ++t) {
    ASSERT_EQ(one[t].size(), many[t].size());
    for (size_t i = 0; i < one[t].size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(double{one[t][i]} - many[t][i]));
      max_change = std::max(
          max_change,
          std::fabs(double{one[t][i]} - (*init)->tables()[t].value[i]));
    }
  }
  EXPECT_GT(max_change, 0.05) << "training moved nothing: the test is void";
  EXPECT_LT(max_diff, 1e-4) << "N=" << n << " differs from one trainer";
}

class SyncEquivalenceTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("shardps_sync_eq_" + std::to_string(::getpid()) + "_" +
            std::to_string(GetParam()));
    std::filesystem::create_directories(dir_);
    WriteData(dir_, 480, 42);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_P(SyncEquivalenceTest, NTrainersMatchOneTrainerWithNTimesTheBatch) {
  const int n = GetParam();
  const int b = 4;
  // Two passes of 480 / (n * b) steps, so momentum state and the pass
  // boundary are both exercised.
  const auto one = RunJob(dir_, 2, 1, n * b, 2, 0, dir_ + "/one");
  const auto many = RunJob(dir_, 2, n, b, 2, 0, dir_ + "/many");
  ExpectSameTraining(dir_, one, many, n);
}

// LARS's trust ratio comes from norms of whole tables whose blocks lie on
// three pservers (summed in block order by every trainer): N trainers on
// 3 pservers end as one trainer with N times the batch on one.
TEST_P(SyncEquivalenceTest, LarsAcrossPserversMatchesOneTrainerOnOne) {
  const int n = GetParam();
  const int b = 4;
  const auto one = RunJob(dir_, 1, 1, n * b, 2, 0, dir_ + "/one", true, false,
                          true, false, false, /*lars=*/true);
  const auto many = RunJob(dir_, 3, n, b, 2, 0, dir_ + "/many", true, false,
                           true, false, n == 2, /*lars=*/true);
  ExpectSameTraining(dir_, one, many, n);
}

// --overlap only moves when the next step's pull is sent: with 2 trainers
// the parameters are the same to the last bit. With more, the pserver sums
// the gradients in the order they arrive, which differs from run to run
// with or without overlap, so only rounding may differ.
TEST_P(SyncEquivalenceTest, OverlapChangesNoBit) {
  const int n = GetParam();
  const auto plain = RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/plain",
                            /*overlap=*/false);
  const auto overlapped = RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/overlapped",
                                 /*overlap=*/true);
  ASSERT_EQ(plain.size(), overlapped.size());
  for (size_t t = 0; t < plain.size(); ++t) {
    ASSERT_EQ(plain[t].size(), overlapped[t].size());
    for (size_t i = 0; i < plain[t].size(); ++i) {
      if (n == 2) {
        ASSERT_EQ(plain[t][i], overlapped[t][i])
            << "table " << t << " [" << i << "]";
      } else {
        ASSERT_NEAR(plain[t][i], overlapped[t][i], 1e-5)
            << "table " << t << " [" << i << "]";
      }
    }
  }
}

// The layer pipeline only moves when each layer's push and pull are sent
// and waited for: the same parameters as one push and one pull per step.
// With 3 trainers or more, rounding may differ (arrival order, as above).
TEST_P(SyncEquivalenceTest, LayerPipelineChangesNoBit) {
  const int n = GetParam();
  const auto whole =
      RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/whole", true, false, true, false,
             /*layer_pipeline=*/false);
  const auto layered =
      RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/layered", true, false, true, false,
             /*layer_pipeline=*/true);
  ASSERT_EQ(whole.size(), layered.size());
  auto init = Model::Create(SmallModel(dir_), 16, 3);
  (*init)->InitializeParameters(7);
  double moved = 0;
  for (size_t t = 0; t < whole.size(); ++t) {
    ASSERT_EQ(whole[t].size(), layered[t].size());
    for (size_t i = 0; i < whole[t].size(); ++i) {
      moved = std::max(moved, std::fabs(double{whole[t][i]} -
                                        (*init)->tables()[t].value[i]));
      if (n == 2) {
        ASSERT_EQ(whole[t][i], layered[t][i])
            << "table " << t << " [" << i << "]";
      } else {
        ASSERT_NEAR(whole[t][i], layered[t][i], 1e-5)
            << "table " << t << " [" << i << "]";
      }
    }
  }
  EXPECT_GT(moved, 0.05) << "training moved nothing: the test is void";
}

// Shared memory moves the same float32 values as TCP: the same parameters
// to the last bit (2 trainers: the pserver's sums do not depend on arrival
// order).
class SharedMemoryTest : public SyncEquivalenceTest {};

TEST_P(SharedMemoryTest, SharedMemoryChangesNoBit) {
  const int n = GetParam();
  const auto tcp = RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/tcp", true, false,
                          /*shared_memory=*/false);
  const auto shared = RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/shared", true, false,
                             /*shared_memory=*/true);
  ASSERT_EQ(tcp.size(), shared.size());
  for (size_t t = 0; t < tcp.size(); ++t) ASSERT_EQ(tcp[t], shared[t]);
}

// Async --overlap sends step k+1's pull with step k's push and the pserver
// answers it once that push is applied: one trainer then computes on
// exactly the parameters it would pull after the push's answer. (In one
// process the push is applied before the pull arrives; the wait itself is
// StalenessGateTest.OwnClockWaitsForThisTrainersPushOnly.)
TEST_P(SharedMemoryTest, AsyncOverlapSeesItsOwnPush) {
  const auto plain = RunJob(dir_, 2, 1, 4, 2, 0, dir_ + "/plain",
                            /*overlap=*/false, false, true, /*async=*/true);
  const auto overlapped = RunJob(dir_, 2, 1, 4, 2, 0, dir_ + "/overlapped",
                                 /*overlap=*/true, false, true, true);
  ASSERT_EQ(plain.size(), overlapped.size());
  for (size_t t = 0; t < plain.size(); ++t) {
    ASSERT_EQ(plain[t], overlapped[t]) << "table " << t;
  }
}

// Async with the next pull during compute and pushes left in flight: the
// trainers end cleanly (every push drained before the last evaluation) and
// the parameters moved and stayed finite.
TEST_P(SyncEquivalenceTest, AsyncPrefetchTrains) {
  const int n = GetParam();
  const auto params = RunJob(dir_, 2, n, 4, 2, 0, dir_ + "/async",
                             /*overlap=*/true, /*async_prefetch=*/true);
  auto init = Model::Create(SmallModel(dir_), 16, 3);
  (*init)->InitializeParameters(7);
  double max_change = 0;
  for (size_t t = 0; t < params.size(); ++t) {
    for (size_t i = 0; i < params[t].size(); ++i) {
      ASSERT_TRUE(std::isfinite(params[t][i]));
      max_change = std::max(
          max_change,
          std::fabs(double{params[t][i]} - (*init)->tables()[t].value[i]));
    }
  }
  EXPECT_GT(max_change, 0.05);
}

INSTANTIATE_TEST_SUITE_P(Trainers, SyncEquivalenceTest,
                         ::testing::Values(2, 3, 4));
INSTANTIATE_TEST_SUITE_P(TwoTrainers, SharedMemoryTest, ::testing::Values(2));

}  // namespace
}  // namespace shardps
