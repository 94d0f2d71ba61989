// TrainingSession against in-process pservers (the request handler through
// InProcessPsClient, no gRPC): the step arithmetic against the optimizers'
// formulas, sparse rows, and the refusals.
#include "trainer/core/training_session.h"

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/transport/in_process_ps_client.h"
#include "gtest/gtest.h"
#include "pserver/server/call_table.h"
#include "pserver/server/pserver.h"

namespace shardps {
namespace {

// `num_servers` in-process pservers for jobs of `num_trainers`, and one
// client set per trainer.
class Cluster {
 public:
  Cluster(int num_servers, int num_trainers) {
    for (int s = 0; s < num_servers; ++s) {
      PserverOptions o;
      o.store.num_trainers = num_trainers;
      servers_.push_back(std::move(*Pserver::Create(o)));
      EXPECT_TRUE(servers_.back()->Start().ok());
      targets_.push_back(
          std::make_unique<SingleJobTarget>(servers_.back()->handler()));
    }
    clients_.resize(num_trainers);
    for (int k = 0; k < num_trainers; ++k) {
      for (int s = 0; s < num_servers; ++s) {
        clients_[k].push_back(std::make_unique<InProcessPsClient>(
            targets_[s].get(), "in-process-" + std::to_string(s)));
      }
    }
  }
  std::vector<PsClientInterface*> For(int k) {
    std::vector<PsClientInterface*> out;
    for (auto& c : clients_[k]) out.push_back(c.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<Pserver>> servers_;
  std::vector<std::unique_ptr<SingleJobTarget>> targets_;
  std::vector<std::vector<std::unique_ptr<InProcessPsClient>>> clients_;
};

TrainerOptions Options(int k, int n, TrainingMode mode = SYNC) {
  TrainerOptions o;
  o.trainer_id = k;
  o.num_trainers = n;
  o.mode = mode;
  o.config.set_block_size(7);  // several blocks, spread over the pservers
  o.ready_timeout = absl::Seconds(30);
  return o;
}

OptimizerConfig Momentum(float lr, float momentum) {
  OptimizerConfig c;
  c.set_type(OptimizerConfig::MOMENTUM);
  c.set_learning_rate(lr);
  c.set_momentum(momentum);
  return c;
}

// Trainer k's gradient at step s: deterministic, different per trainer.
std::vector<float> Grad(int k, int64_t s, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = std::sin(0.3f * i + 1.7f * k + 0.11f * s);
  }
  return g;
}

// Two sync trainers, 3 pservers, a 5x4 table with momentum: after 20 steps
// every trainer holds v -= lr * m, m = mu * m + mean(g_k), the same values.
TEST(TrainingSessionTest, SyncStepsApplyTheMeanGradient) {
  const int kTrainers = 2, kSteps = 20;
  const size_t kSize = 20;
  Cluster cluster(3, kTrainers);
  std::vector<float> init(kSize);
  for (size_t i = 0; i < kSize; ++i) init[i] = 0.01f * i;
  std::vector<std::vector<float>> finals(kTrainers);
  std::vector<absl::Status> status(kTrainers);
  std::vector<std::thread> threads;
  for (int k = 0; k < kTrainers; ++k) {
    threads.emplace_back([&, k] {
      TrainingSession s(Options(k, kTrainers), cluster.For(k));
      auto t = s.AddDenseTable("w", {5, 4}, Momentum(0.1f, 0.9f));
      ASSERT_TRUE(t.ok()) << t.status();
      std::vector<float> values(kSize, -1.f);
      status[k] = s.Start({init.data()}, 0);
      if (!status[k].ok()) return;
      status[k] = s.PullDense({values.data()});
      for (int step = 0; step < kSteps && status[k].ok(); ++step) {
        const std::vector<float> g = Grad(k, step, kSize);
        std::vector<float*> next = {values.data()};
        auto out = s.EndStep({g.data()}, &next, nullptr, 1.0, 1);
        status[k] = out.status();
        if (out.ok()) {
          EXPECT_EQ(out->step, step + 1);
        }
      }
      if (status[k].ok()) status[k] = s.Finish();
      finals[k] = values;
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < kTrainers; ++k) ASSERT_TRUE(status[k].ok()) << status[k];
  std::vector<double> v(init.begin(), init.end()), m(kSize, 0);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kSize; ++i) {
      double g = 0;
      for (int k = 0; k < kTrainers; ++k) g += Grad(k, step, kSize)[i];
      m[i] = 0.9 * m[i] + g / kTrainers;
      v[i] -= 0.1 * m[i];
    }
  }
  for (int k = 0; k < kTrainers; ++k) {
    for (size_t i = 0; i < kSize; ++i) {
      EXPECT_NEAR(finals[k][i], v[i], 1e-5) << "trainer " << k << " i " << i;
    }
  }
}

// A sparse table with Adagrad: rows of keys never pushed read as their
// initial value; pushed rows follow acc += g^2, w -= lr * g / sqrt(acc).
TEST(TrainingSessionTest, SparseRowsFollowAdagrad) {
  Cluster cluster(2, 1);
  TrainingSession s(Options(0, 1), cluster.For(0));
  SparseTableOptions sparse;
  sparse.set_dim(3);
  sparse.mutable_init()->set_type(RowInitializer::CONSTANT);
  sparse.mutable_init()->set_scale(0.5f);
  OptimizerConfig adagrad;
  adagrad.set_type(OptimizerConfig::ADAGRAD);
  adagrad.set_learning_rate(0.1f);
  adagrad.set_initial_accumulator(0.1f);
  adagrad.set_epsilon(1e-10f);
  auto t = s.AddSparseTable("emb", sparse, adagrad);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(s.Start({}, 0).ok());
  const std::vector<uint64_t> keys = {7, 1ull << 40, 12345};
  std::vector<float> rows(9);
  ASSERT_TRUE(s.PullSparse(*t, keys, rows.data()).ok());
  for (float r : rows) EXPECT_EQ(r, 0.5f);
  std::vector<float> g = {1, 2, 3, 0, 0, 0, -1, 0.5f, 0};
  ASSERT_TRUE(s.PushSparse(*t, keys, g).ok());
  ASSERT_TRUE(s.EndStep({}, nullptr, nullptr, 0, 0).ok());
  ASSERT_TRUE(s.PullSparse(*t, keys, rows.data()).ok());
  for (size_t i = 0; i < 9; ++i) {
    const double acc = 0.1 + double{g[i]} * g[i];
    const double want = 0.5 - 0.1 * g[i] / (std::sqrt(acc) + 1e-10);
    EXPECT_NEAR(rows[i], want, 1e-6) << i;
  }
  // Wrong sizes are refused and queue nothing.
  EXPECT_EQ(s.PushSparse(*t, keys, absl::MakeSpan(g).subspan(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.PushSparse(9, keys, g).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.Finish().ok());
}

// Gradients pushed ahead of the step's end (a backward hook's), one table
// by one trainer and the other by the other, train as EndStep's pushes do;
// a table sent twice in a step is refused.
TEST(TrainingSessionTest, EarlyPushesTrainAsTheStepsPushes) {
  const int kTrainers = 2, kSteps = 10;
  const size_t kSize = 6;
  Cluster cluster(2, kTrainers);
  std::vector<float> init(kSize, 0.5f);
  std::vector<std::vector<float>> finals(kTrainers);
  std::vector<absl::Status> status(kTrainers);
  std::vector<std::thread> threads;
  for (int k = 0; k < kTrainers; ++k) {
    threads.emplace_back([&, k] {
      TrainingSession s(Options(k, kTrainers), cluster.For(k));
      ASSERT_TRUE(s.AddDenseTable("a", {2, 3}, Momentum(0.1f, 0.9f)).ok());
      ASSERT_TRUE(s.AddDenseTable("b", {6}, Momentum(0.1f, 0.9f)).ok());
      std::vector<float> a(kSize), b(kSize);
      status[k] = s.Start({init.data(), init.data()}, 0);
      if (status[k].ok()) status[k] = s.PullDense({a.data(), b.data()});
      for (int step = 0; step < kSteps && status[k].ok(); ++step) {
        const std::vector<float> g = Grad(k, step, kSize);
        status[k] = s.PushDenseEarly(k, g.data());  // trainer k: table k
        if (!status[k].ok()) break;
        if (step == 0) {
          EXPECT_EQ(s.PushDenseEarly(k, g.data()).code(),
                    absl::StatusCode::kInvalidArgument);
          EXPECT_EQ(s.PushDenseEarly(2, g.data()).code(),
                    absl::StatusCode::kInvalidArgument);
        }
        std::vector<float*> next = {a.data(), b.data()};
        status[k] =
            s.EndStep({g.data(), g.data()}, &next, nullptr, 1.0, 1).status();
      }
      if (status[k].ok()) status[k] = s.Finish();
      finals[k] = a;
      finals[k].insert(finals[k].end(), b.begin(), b.end());
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < kTrainers; ++k) ASSERT_TRUE(status[k].ok()) << status[k];
  std::vector<double> v(kSize, 0.5), m(kSize, 0);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kSize; ++i) {
      m[i] =
          0.9 * m[i] + (Grad(0, step, kSize)[i] + Grad(1, step, kSize)[i]) / 2;
      v[i] -= 0.1 * m[i];
    }
  }
  for (int k = 0; k < kTrainers; ++k) {
    for (size_t i = 0; i < 2 * kSize; ++i) {
      EXPECT_NEAR(finals[k][i], v[i % kSize], 1e-5) << k << " " << i;
    }
  }
  EXPECT_EQ(finals[0], finals[1]);
}

// Rows fetched as a step ends are those PullSparse gives at the next step,
// in sync mode (after both trainers' pushes) and for two tables at once;
// a fetch of a table that is not is refused before anything is sent.
TEST(TrainingSessionTest, NextRowsFetchedWithThePushAreTheNextSteps) {
  const int kTrainers = 2, kSteps = 6;
  Cluster cluster(2, kTrainers);
  std::vector<absl::Status> status(kTrainers);
  std::vector<std::thread> threads;
  for (int k = 0; k < kTrainers; ++k) {
    threads.emplace_back([&, k] {
      TrainingSession s(Options(k, kTrainers), cluster.For(k));
      SparseTableOptions wide, narrow;
      wide.set_dim(4);
      wide.mutable_init()->set_type(RowInitializer::UNIFORM);
      wide.mutable_init()->set_scale(0.1f);
      narrow.set_dim(1);
      auto emb = s.AddSparseTable("emb", wide, Momentum(0.1f, 0.9f));
      auto bias = s.AddSparseTable("bias", narrow, Momentum(0.1f, 0.9f));
      ASSERT_TRUE(emb.ok() && bias.ok());
      status[k] = s.Start({}, 0);
      std::vector<uint64_t> keys = {3, 17, 1ull << 41, 99 + 0ull + k};
      std::vector<float> e(16), b(4), pulled_e(16), pulled_b(4);
      for (int step = 0; step < kSteps && status[k].ok(); ++step) {
        std::vector<float> ge = Grad(k, step, 16), gb = Grad(k, step, 4);
        status[k] = s.PushSparse(*emb, keys, ge);
        if (status[k].ok()) status[k] = s.PushSparse(*bias, keys, gb);
        if (!status[k].ok()) break;
        std::vector<SparseFetch> next = {{*emb, keys, e.data()},
                                         {*bias, keys, b.data()}};
        if (step == 0) {
          std::vector<SparseFetch> bad = {{7, keys, e.data()}};
          EXPECT_EQ(s.EndStep({}, nullptr, &bad, 0, 0).status().code(),
                    absl::StatusCode::kInvalidArgument);
        }
        auto out = s.EndStep({}, nullptr, &next, 0, 0);
        status[k] = out.status();
        if (!out.ok()) break;
        status[k] = s.PullSparse(*emb, keys, pulled_e.data());
        if (status[k].ok())
          status[k] = s.PullSparse(*bias, keys, pulled_b.data());
        EXPECT_EQ(e, pulled_e) << "trainer " << k << " step " << step;
        EXPECT_EQ(b, pulled_b) << "trainer " << k << " step " << step;
      }
      if (status[k].ok()) status[k] = s.Finish();
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < kTrainers; ++k) ASSERT_TRUE(status[k].ok()) << status[k];
}

// A model changed between trainers: the second trainer's Start fails
// naming the difference, and the job the chief made is unchanged.
TEST(TrainingSessionTest, AnotherModelIsRefused) {
  Cluster cluster(1, 2);
  TrainerOptions o0 = Options(0, 2), o1 = Options(1, 2);
  o1.ready_timeout = absl::Seconds(5);
  TrainingSession chief(o0, cluster.For(0));
  ASSERT_TRUE(chief.AddDenseTable("w", {4}, Momentum(0.1f, 0.9f)).ok());
  std::vector<float> init(4, 1.f);
  absl::Status chief_started;
  std::thread t([&] { chief_started = chief.Start({init.data()}, 0); });
  TrainingSession other(o1, cluster.For(1));
  ASSERT_TRUE(other.AddDenseTable("w", {5}, Momentum(0.1f, 0.9f)).ok());
  std::vector<float> mine(5, 2.f);
  absl::Status s = other.Start({mine.data()}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  t.join();
  // The chief waits for two trainers; its job is the one it made.
  EXPECT_EQ(chief.job().tables(0).shape(0), 4);
}

TEST(TrainingSessionTest, BadTablesAreRefused) {
  Cluster cluster(1, 1);
  TrainingSession s(Options(0, 1, ASYNC), cluster.For(0));
  EXPECT_EQ(s.AddDenseTable("", {3}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.AddDenseTable("w", {3, 0}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.AddDenseTable("w", {3}, {}).ok());
  EXPECT_EQ(s.AddDenseTable("w", {3}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  OptimizerConfig lars;
  lars.set_type(OptimizerConfig::LARS);
  absl::Status l = s.AddDenseTable("l", {3}, lars).status();
  EXPECT_NE(l.message().find("--mode=async"), std::string::npos) << l;
  SparseTableOptions wide;
  wide.set_dim(0);
  EXPECT_EQ(s.AddSparseTable("e", wide, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Start({}, 0).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> v(3);
  EXPECT_EQ(s.PullDense({v.data()}).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardps
