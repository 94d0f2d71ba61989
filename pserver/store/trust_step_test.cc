// LARS across pservers (docs/tuning.md, "LARS"): two stores hold the blocks
// of one table; the norms of each step meet as a trainer sums them, and
// the result equals LARS on the whole table in one process.
#include <cmath>
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "pserver/store/parameter_store.h"
#include "pserver/testing/store_testing.h"

namespace shardps {
namespace {

constexpr float kLr = 0.5f, kMomentum = 0.9f, kEta = 0.02f, kDecay = 1e-3f;

OptimizerConfig Lars() {
  OptimizerConfig o;
  o.set_type(OptimizerConfig::LARS);
  o.set_learning_rate(kLr);
  o.set_momentum(kMomentum);
  o.set_trust_coefficient(kEta);
  o.set_weight_decay(kDecay);
  return o;
}

// Table "w": 10 values in blocks of 4 (4, 4, 2) with LARS; "b": 3 values,
// SGD. Store 0 holds w's blocks 0 and 2 and b, store 1 w's block 1.
JobSpec MakeJob(TrainingMode mode) {
  return testing::MakeJobSpec(
      mode, 2,
      {testing::DenseTableSpec("w", 10, 4, Lars()),
       testing::DenseTableSpec("b", 3, 4, testing::Sgd(1.0f))});
}

const std::vector<std::vector<BlockId>> kHeld = {{{0, 0}, {0, 2}, {1, 0}},
                                                 {{0, 1}}};
const std::vector<float> kInit = {1, -2, 3, 4, -5, 6, 7, 8, 9, -10};
const size_t kStart[] = {0, 4, 8, 10};

struct NormsResult {
  absl::Notification done;
  absl::Status status;
  std::vector<double> out;
};

class LarsStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int s = 0; s < 2; ++s) {
      StoreOptions options;
      options.max_pull_wait = absl::Seconds(10);
      stores_.push_back(std::make_unique<ParameterStore>(options));
      ASSERT_TRUE(stores_[s]->InitJob(MakeJob(SYNC), kHeld[s]).ok());
      std::vector<std::vector<float>> values;
      std::vector<BlockData> data;
      for (const BlockId& id : kHeld[s]) {
        values.push_back(
            id.table_id == 1
                ? std::vector<float>(3, 0.0f)
                : std::vector<float>(kInit.begin() + kStart[id.block],
                                     kInit.begin() + kStart[id.block + 1]));
      }
      for (size_t i = 0; i < values.size(); ++i) {
        data.push_back({kHeld[s][i].table_id, kHeld[s][i].block, values[i]});
      }
      ASSERT_TRUE(stores_[s]->SetInitialValues(data).ok());
      ASSERT_TRUE(stores_[s]->CommitInit().ok());
    }
  }

  // Trainer k's gradient of table w at `step`.
  static std::vector<float> Grad(int k, int64_t step) {
    std::vector<float> g(10);
    for (int i = 0; i < 10; ++i) {
      g[i] = 0.1f * std::sin(1.0f + i * (k + 2) + 0.7f * step);
    }
    return g;
  }

  absl::Status PushW(int k, int64_t step) {
    const std::vector<float> g = Grad(k, step);
    for (int s = 0; s < 2; ++s) {
      std::vector<std::vector<float>> parts;
      std::vector<BlockData> data;
      for (const BlockId& id : kHeld[s]) {
        parts.push_back(
            id.table_id == 1
                ? std::vector<float>(3, 0.0f)
                : std::vector<float>(g.begin() + kStart[id.block],
                                     g.begin() + kStart[id.block + 1]));
      }
      for (size_t i = 0; i < parts.size(); ++i) {
        data.push_back({kHeld[s][i].table_id, kHeld[s][i].block, parts[i]});
      }
      absl::Status st = stores_[s]->Push(k, step, data);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }

  std::unique_ptr<NormsResult> StartNorms(int s, int k, int64_t step,
                                          std::vector<BlockId> blocks) {
    auto r = std::make_unique<NormsResult>();
    r->out.assign(3 * blocks.size(), -1);
    NormsResult* p = r.get();
    stores_[s]->PullNorms(k, step, blocks, p->out.data(),
                          [p](absl::Status st, absl::Duration) {
                            p->status = std::move(st);
                            p->done.Notify();
                          });
    return r;
  }

  // What a trainer does after its push of `step`: both stores' norms of
  // w, summed in block order, then the table's norms to both.
  void MeetAndApply(int k, int64_t step) {
    auto n0 = StartNorms(0, k, step, {{0, 0}, {0, 2}});
    auto n1 = StartNorms(1, k, step, {{0, 1}});
    ASSERT_TRUE(n0->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    ASSERT_TRUE(n1->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    ASSERT_TRUE(n0->status.ok()) << n0->status;
    ASSERT_TRUE(n1->status.ok()) << n1->status;
    EXPECT_EQ(n0->out[2], step);
    const double ww = n0->out[0] + n1->out[0] + n0->out[3];
    const double gg = n0->out[1] + n1->out[1] + n0->out[4];
    for (int s = 0; s < 2; ++s) {
      ASSERT_TRUE(stores_[s]
                      ->trust()
                      .Apply(k, step, 0, std::sqrt(ww), std::sqrt(gg))
                      .ok());
    }
  }

  std::vector<float> Weights() {
    std::vector<float> w;
    for (uint32_t b = 0; b < 3; ++b) {
      std::vector<float> part = stores_[b == 1 ? 1 : 0]->TEST_BlockValues(0, b);
      w.insert(w.end(), part.begin(), part.end());
    }
    return w;
  }

  std::vector<std::unique_ptr<ParameterStore>> stores_;
};

TEST_F(LarsStoreTest, MatchesLarsOnTheWholeTable) {
  std::vector<double> w(kInit.begin(), kInit.end()), v(10, 0);
  for (int64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(PushW(0, step).ok());
    // Trainer 0 asks for the norms before trainer 1 has pushed: held.
    auto early = StartNorms(1, 0, step, {{0, 1}});
    EXPECT_FALSE(early->done.HasBeenNotified());
    ASSERT_TRUE(PushW(1, step).ok());
    ASSERT_TRUE(early->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    ASSERT_TRUE(early->status.ok()) << early->status;
    // Assembled, not applied: a pull of the next version waits.
    testing::PullArgs a;
    a.min_version = step + 1;
    auto pull = testing::StartPull(stores_[1].get(), a, {{0, 1}});
    EXPECT_FALSE(pull->done.HasBeenNotified());
    // A retried push of the step to the LARS block is a duplicate
    // meanwhile.
    const std::vector<float> late = Grad(1, step);
    std::vector<float> part(late.begin() + 4, late.begin() + 8);
    std::vector<BlockData> retry = {{0, 1, part}};
    absl::Status again = stores_[1]->Push(1, step, retry);
    ASSERT_TRUE(again.ok()) << again;
    MeetAndApply(0, step);
    ASSERT_TRUE(pull->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
    ASSERT_TRUE(pull->status.ok());
    // The other trainer's norms change nothing.
    const std::vector<float> before = Weights();
    MeetAndApply(1, step);
    EXPECT_EQ(Weights(), before);
    // The reference: You et al. 2017, Algorithm 1, the mean gradient.
    std::vector<double> g(10);
    const std::vector<float> g0 = Grad(0, step), g1 = Grad(1, step);
    double ww = 0, gg = 0;
    for (int i = 0; i < 10; ++i) {
      g[i] = (static_cast<double>(g0[i]) + g1[i]) / 2;
      ww += w[i] * w[i];
      gg += g[i] * g[i];
    }
    const double local =
        kEta * std::sqrt(ww) / (std::sqrt(gg) + kDecay * std::sqrt(ww));
    for (int i = 0; i < 10; ++i) {
      v[i] = kMomentum * v[i] + kLr * local * (g[i] + kDecay * w[i]);
      w[i] -= v[i];
    }
    const std::vector<float> got = Weights();
    for (int i = 0; i < 10; ++i) {
      ASSERT_NEAR(got[i], w[i], 1e-5) << "step " << step << " value " << i;
    }
  }
  EXPECT_EQ(stores_[0]->TEST_BlockVersion(0, 0), 5);
  EXPECT_EQ(stores_[0]->TEST_BlockVersion(1, 0), 5);  // SGD table b
}

TEST_F(LarsStoreTest, PushAfterAssemblyChangesNothing) {
  // Trainer 1 leaves; trainer 0's push completes step 0, which waits for
  // its norms. Trainer 1, back, pushes step 0 on store 1: its gradient must
  // not join the assembled step (its norms are out already).
  for (auto& s : stores_) ASSERT_TRUE(s->Leave(1, 0).ok());
  ASSERT_TRUE(PushW(0, 0).ok());
  for (auto& s : stores_) {
    ASSERT_TRUE(s->Register(1, 7, absl::Now()).ok());
  }
  const std::vector<float> g1 = Grad(1, 0);
  std::vector<float> part(g1.begin() + 4, g1.begin() + 8);
  std::vector<BlockData> late = {{0, 1, part}};
  const absl::Status pushed = stores_[1]->Push(1, 0, late);
  MeetAndApply(0, 0);
  // Trainer 0's gradient alone moved block 1.
  std::vector<double> w(kInit.begin(), kInit.end()), g(10);
  const std::vector<float> g0 = Grad(0, 0);
  double ww = 0, gg = 0;
  for (int i = 0; i < 10; ++i) {
    g[i] = g0[i];
    ww += w[i] * w[i];
    gg += g[i] * g[i];
  }
  const double local =
      kEta * std::sqrt(ww) / (std::sqrt(gg) + kDecay * std::sqrt(ww));
  const std::vector<float> got = Weights();
  for (int i = 0; i < 10; ++i) {
    const double v = kLr * local * (g[i] + kDecay * w[i]);
    ASSERT_NEAR(got[i], w[i] - v, 1e-5)
        << i << " (late push: " << pushed << ")";
  }
}

// A push of several tables' norms is all or nothing: where one table's
// step is not assembled, or one table is named twice, the other table's
// blocks keep their step too.
TEST(LarsStoreMultiTableTest, NormsOfSeveralTablesAreAllOrNothing) {
  StoreOptions options;
  options.max_pull_wait = absl::Seconds(10);
  ParameterStore store(options);
  const JobSpec job =
      testing::MakeJobSpec(SYNC, 1,
                           {testing::DenseTableSpec("w", 4, 4, Lars()),
                            testing::DenseTableSpec("v", 4, 4, Lars())});
  ASSERT_TRUE(store.InitJob(job, {{0, 0}, {1, 0}}).ok());
  const std::vector<float> init = {1, 2, 3, 4}, g = {0.1f, 0.2f, 0.3f, 0.4f};
  ASSERT_TRUE(store.SetInitialValues({{0, 0, init}, {1, 0, init}}).ok());
  ASSERT_TRUE(store.CommitInit().ok());
  // Step 0 assembled for w only.
  ASSERT_TRUE(store.Push(0, 0, {{0, 0, g}}).ok());
  const TrustStep::TableNorm both[] = {{0, 5.0, 1.0, {}}, {1, 5.0, 1.0, {}}};
  EXPECT_EQ(store.trust().Apply(0, 0, both).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.TEST_BlockVersion(0, 0), 0);
  ASSERT_TRUE(store.Push(0, 0, {{1, 0, g}}).ok());
  const TrustStep::TableNorm twice[] = {{0, 5.0, 1.0, {}}, {0, 5.0, 1.0, {}}};
  EXPECT_EQ(store.trust().Apply(0, 0, twice).code(),
            absl::StatusCode::kInvalidArgument);
  const TrustStep::TableNorm bad[] = {{0, 5.0, 1.0, {}}, {1, NAN, 1.0, {}}};
  EXPECT_EQ(store.trust().Apply(0, 0, bad).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.TEST_BlockVersion(0, 0), 0);
  EXPECT_EQ(store.TEST_BlockVersion(1, 0), 0);
  // Both assembled, in either order: both apply.
  const TrustStep::TableNorm reversed[] = {{1, 5.0, 1.0, {}},
                                           {0, 5.0, 1.0, {}}};
  ASSERT_TRUE(store.trust().Apply(0, 0, reversed).ok());
  EXPECT_EQ(store.TEST_BlockVersion(0, 0), 1);
  EXPECT_EQ(store.TEST_BlockVersion(1, 0), 1);
}

TEST_F(LarsStoreTest, Refusals) {
  // Norms of a step not assembled cannot be applied.
  EXPECT_EQ(stores_[0]->trust().Apply(0, 0, 0, 1.0, 1.0).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(PushW(0, 0).ok());
  ASSERT_TRUE(PushW(1, 0).ok());
  // Table b has no LARS: neither norms nor a ratio.
  EXPECT_EQ(stores_[0]->trust().Apply(0, 0, 1, 1.0, 1.0).code(),
            absl::StatusCode::kInvalidArgument);
  auto n = StartNorms(0, 0, 0, {{1, 0}});
  ASSERT_TRUE(n->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(n->status.code(), absl::StatusCode::kInvalidArgument);
  // Norms of a step the block is not at.
  n = StartNorms(0, 0, 3, {{0, 0}});
  ASSERT_TRUE(n->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(n->status.code(), absl::StatusCode::kInvalidArgument);
  // Bad norms, unknown tables.
  EXPECT_EQ(stores_[0]->trust().Apply(0, 0, 0, NAN, 1.0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stores_[0]->trust().Apply(0, 0, 0, 1.0, -1.0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stores_[0]->trust().Apply(0, 0, 7, 1.0, 1.0).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(stores_[0]->TEST_BlockVersion(0, 0), 0);
  // A job with LARS is SYNC, without replicas_to_aggregate.
  ParameterStore async{StoreOptions{}};
  EXPECT_EQ(async.InitJob(MakeJob(ASYNC), kHeld[1]).status().code(),
            absl::StatusCode::kInvalidArgument);
  testing::JobOptions o;
  o.replicas_to_aggregate = 1;
  ParameterStore k_of_n{StoreOptions{}};
  EXPECT_EQ(k_of_n
                .InitJob(testing::MakeJobSpec(
                             SYNC, 2,
                             {testing::DenseTableSpec("w", 10, 4, Lars())}, o),
                         kHeld[1])
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps
