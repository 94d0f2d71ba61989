#include "compression/pull_delta.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compression/threshold_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kTable = 1;
constexpr uint32_t kBlock = 2;

TEST(ChooseDeltaThresholdTest, NothingToSendIsZero) {
  std::vector<float> scratch;
  EXPECT_EQ(ChooseDeltaThreshold(std::vector<float>(100, 0.0f), 10, &scratch),
            0);
  EXPECT_EQ(ChooseDeltaThreshold({NAN, INFINITY, 0.0f}, 10, &scratch), 0);
}

TEST(ChooseDeltaThresholdTest, LeavesTheLeastResidual) {
  std::vector<float> scratch;
  // Quanta q and 2q (two trainers' threshold messages averaged): q when
  // more elements moved by q, 2q when more moved by 2q.
  const float q = 0.015f;
  std::vector<float> d(1000, 0.0f);
  d[1] = 2 * q;
  d[5] = -q;
  d[9] = q;
  d[20] = -q;
  EXPECT_EQ(ChooseDeltaThreshold(d, 100, &scratch), q);
  d[5] = -2 * q;
  d[9] = 2 * q;
  EXPECT_EQ(ChooseDeltaThreshold(d, 100, &scratch), 2 * q);
  // Among the `max_entries` largest only.
  EXPECT_EQ(ChooseDeltaThreshold(d, 1, &scratch), 2 * q);
}

// A sync job of two trainers on one block of 4096 values: the master
// values move by sparse steps, and both trainers pull each version.
class SyncPullDeltaTest : public ::testing::Test {
 protected:
  static constexpr int64_t kN = 4096;

  SyncPullDeltaTest() {
    std::normal_distribution<float> normal(0, 1);
    for (float& v : values_) v = normal(rng_);
  }

  // Serves version `version` of the values to `decoder`, which takes it
  // into *out; a delta's bytes are counted.
  void Pull(int64_t version, PullDeltaDecoder* decoder,
            std::vector<float>* out) {
    const PullDeltaDecoder::Held h = decoder->held(kTable, kBlock);
    std::string bytes;
    PullDeltaEncoder::Reply r;
    ASSERT_TRUE(encoder_
                    .Serve(kTable, kBlock, 1, version, values_, h.epoch,
                           h.version, &bytes, &r)
                    .ok());
    // Dense only the first time.
    EXPECT_EQ(r.dense, version == 0);
    EXPECT_EQ(r.version, version);
    if (!r.dense) {
      EXPECT_EQ(r.base_version, version - 1);
      EXPECT_LE(bytes.size(), 4 * (kN / 17 + 4));
      delta_bytes_ += bytes.size();
      ++steps_;
    }
    ASSERT_TRUE(decoder
                    ->Take(kTable, kBlock, r.dense, r.epoch, r.base_version,
                           r.version, bytes, absl::MakeSpan(*out))
                    .ok());
  }

  // Versions 0 to 199, each but the first after 40 sparse steps, pulled
  // by both trainers, whose copies must agree bit for bit.
  void RunMovingVersions() {
    std::uniform_int_distribution<int> pick(0, kN - 1);
    for (int64_t version = 0; version < 200; ++version) {
      if (version > 0) {
        for (int k = 0; k < 40; ++k)
          values_[pick(rng_)] += (k % 2 ? 0.015f : -0.03f);
      }
      for (auto [decoder, out] :
           {std::make_pair(&t0_, &out0_), std::make_pair(&t1_, &out1_)}) {
        ASSERT_NO_FATAL_FAILURE(Pull(version, decoder, out));
      }
      ASSERT_EQ(std::memcmp(out0_.data(), out1_.data(), kN * sizeof(float)), 0);
    }
  }

  // The largest difference between the values and trainer 0's copy.
  double Lag() const {
    double worst = 0;
    for (int64_t i = 0; i < kN; ++i) {
      worst = std::max(worst, std::fabs(double{values_[i]} - out0_[i]));
    }
    return worst;
  }

  std::vector<float> values_ = std::vector<float>(kN);
  std::mt19937 rng_{7};
  PullDeltaEncoder encoder_;
  const PullDeltaDecoder::BlockSize size_{kTable, kBlock, kN};
  PullDeltaDecoder t0_{absl::MakeConstSpan(&size_, 1)};
  PullDeltaDecoder t1_{absl::MakeConstSpan(&size_, 1)};
  std::vector<float> out0_ = std::vector<float>(kN);
  std::vector<float> out1_ = std::vector<float>(kN);
  size_t delta_bytes_ = 0, steps_ = 0;
};

// Both trainers hold the pserver's shadow bit for bit.
TEST_F(SyncPullDeltaTest, TrainersHoldTheShadowExactly) {
  ASSERT_NO_FATAL_FAILURE(RunMovingVersions());
}

TEST_F(SyncPullDeltaTest, TheLagIsSmallAndDeltasAreFarSmallerThanDense) {
  ASSERT_NO_FATAL_FAILURE(RunMovingVersions());
  // The residual stays small: what lags is at most a few quanta.
  EXPECT_LT(Lag(), 0.2);
  // 50 times fewer bytes than dense pulls.
  EXPECT_LT(delta_bytes_, steps_ * kN * sizeof(float) / 50);
}

TEST_F(SyncPullDeltaTest, ErrorFeedbackCatchesUpOnceTheValuesStop) {
  ASSERT_NO_FATAL_FAILURE(RunMovingVersions());
  // Once the values stop moving, error feedback brings the copies to them.
  for (int64_t version = 200; version < 400; ++version) {
    const PullDeltaDecoder::Held h = t0_.held(kTable, kBlock);
    std::string bytes;
    PullDeltaEncoder::Reply r;
    values_[0] += 0;  // a version with no change
    ASSERT_TRUE(encoder_
                    .Serve(kTable, kBlock, 1, version, values_, h.epoch,
                           h.version, &bytes, &r)
                    .ok());
    ASSERT_TRUE(t0_.Take(kTable, kBlock, r.dense, r.epoch, r.base_version,
                         r.version, bytes, absl::MakeSpan(out0_))
                    .ok());
  }
  EXPECT_LT(Lag(), 1e-5);
}

TEST(PullDeltaTest, AnAsyncTrainerBehindGetsTheChain) {
  const int64_t n = 1024;
  std::vector<float> values(n, 1.0f);
  PullDeltaEncoder encoder;
  const PullDeltaDecoder::BlockSize size{kTable, kBlock, n};
  PullDeltaDecoder fast({&size, 1}), slow({&size, 1});
  std::vector<float> out(n);
  auto pull = [&](PullDeltaDecoder* d, int64_t version) {
    const PullDeltaDecoder::Held h = d->held(kTable, kBlock);
    std::string bytes;
    PullDeltaEncoder::Reply r;
    EXPECT_TRUE(encoder
                    .Serve(kTable, kBlock, 1, version, values, h.epoch,
                           h.version, &bytes, &r)
                    .ok());
    EXPECT_TRUE(d->Take(kTable, kBlock, r.dense, r.epoch, r.base_version,
                        r.version, bytes, absl::MakeSpan(out))
                    .ok());
    return r;
  };
  pull(&fast, 0);
  pull(&slow, 0);
  for (int64_t v = 1; v <= 3; ++v) {
    values[v * 10] += 0.5f;
    pull(&fast, v);
  }
  std::vector<float> fast_values = out;
  const PullDeltaEncoder::Reply r = pull(&slow, 3);
  EXPECT_FALSE(r.dense);
  EXPECT_EQ(r.base_version, 0);
  EXPECT_EQ(out, fast_values);
  // A pull answered with older values than the shadow's is served from the
  // shadow as it is.
  EXPECT_EQ(pull(&slow, 2).version, 3);
}

TEST(PullDeltaTest, DenseWhenTheShadowIsNotTheOneHeld) {
  const int64_t n = 256;
  std::vector<float> values(n, 2.0f);
  PullDeltaEncoder encoder;
  std::string bytes;
  PullDeltaEncoder::Reply r;
  ASSERT_TRUE(
      encoder.Serve(kTable, kBlock, 1, 5, values, 0, 0, &bytes, &r).ok());
  ASSERT_TRUE(r.dense);
  EXPECT_EQ(bytes.size(), n * sizeof(float));
  const uint64_t epoch = r.epoch;
  // Another epoch, a version never held, a negative one: dense.
  for (auto [e, v] :
       {std::make_pair(epoch + 1, int64_t{5}),
        std::make_pair(epoch, int64_t{4}), std::make_pair(epoch, int64_t{-1}),
        std::make_pair(epoch, int64_t{1} << 62)}) {
    ASSERT_TRUE(
        encoder.Serve(kTable, kBlock, 1, 5, values, e, v, &bytes, &r).ok());
    EXPECT_TRUE(r.dense) << e << " " << v;
  }
  // Held: an empty change.
  ASSERT_TRUE(
      encoder.Serve(kTable, kBlock, 1, 5, values, epoch, 5, &bytes, &r).ok());
  EXPECT_FALSE(r.dense);
  EXPECT_TRUE(bytes.empty());
  // A rollback (a new generation) starts a new shadow: dense to everyone.
  ASSERT_TRUE(
      encoder.Serve(kTable, kBlock, 2, 3, values, epoch, 5, &bytes, &r).ok());
  EXPECT_TRUE(r.dense);
  EXPECT_NE(r.epoch, epoch);
  EXPECT_EQ(r.version, 3);
}

TEST(PullDeltaTest, KeptMessagesStayBelowTheDenseBlock) {
  const int64_t n = 128;  // 2 entries a message at most
  std::vector<float> values(n, 0.0f);
  PullDeltaEncoder encoder;
  std::string bytes;
  PullDeltaEncoder::Reply r;
  ASSERT_TRUE(
      encoder.Serve(kTable, kBlock, 1, 0, values, 0, 0, &bytes, &r).ok());
  const uint64_t epoch = r.epoch;
  for (int64_t v = 1; v <= 100; ++v) {
    values[v % n] += 1.0f;
    ASSERT_TRUE(
        encoder.Serve(kTable, kBlock, 1, v, values, epoch, v - 1, &bytes, &r)
            .ok());
  }
  EXPECT_LE(encoder.MemoryBytes(), 4 * n * sizeof(float));
  // Too far behind for the kept messages: dense.
  ASSERT_TRUE(
      encoder.Serve(kTable, kBlock, 1, 100, values, epoch, 1, &bytes, &r).ok());
  EXPECT_TRUE(r.dense);
}

TEST(PullDeltaTest, ShadowsAreCountedAndRefusedPastTheLimit) {
  int64_t used = 0;
  const int64_t limit = 3000;
  {
    PullDeltaEncoder encoder(
        PullDeltaEncoder::Accounting{[&](int64_t n) {
                                       if (used + n > limit) return false;
                                       used += n;
                                       return true;
                                     },
                                     [&](int64_t n) { used -= n; }});
    std::vector<float> small(100, 1.0f), large(1000, 1.0f);
    std::string bytes;
    PullDeltaEncoder::Reply r;
    ASSERT_TRUE(encoder.Serve(kTable, 0, 1, 0, small, 0, 0, &bytes, &r).ok());
    EXPECT_EQ(used, 100 * PullDeltaEncoder::kBytesPerValue);
    // Served again, or restarted by a rollback: nothing more.
    ASSERT_TRUE(encoder.Serve(kTable, 0, 2, 0, small, 0, 0, &bytes, &r).ok());
    EXPECT_EQ(used, 100 * PullDeltaEncoder::kBytesPerValue);
    absl::Status s = encoder.Serve(kTable, 1, 1, 0, large, 0, 0, &bytes, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(s.message(), HasSubstr("--compressed_pulls=false"));
  }
  EXPECT_EQ(used, 0);  // given back with the encoder
}

TEST(PullDeltaDecoderTest, RefusesWhatDoesNotFollow) {
  const int64_t n = 64;
  const PullDeltaDecoder::BlockSize size{kTable, kBlock, n};
  PullDeltaDecoder d({&size, 1});
  std::vector<float> out(n);
  std::string dense(n * sizeof(float), '\0');
  ASSERT_TRUE(
      d.Take(kTable, kBlock, true, 9, 0, 4, dense, absl::MakeSpan(out)).ok());
  // Not held, wrong size, wrong epoch or base version, a bad message.
  EXPECT_EQ(d.Take(kTable, 7, true, 9, 0, 4, dense, absl::MakeSpan(out)).code(),
            absl::StatusCode::kDataLoss);
  std::vector<float> small(n - 1);
  EXPECT_EQ(d.Take(kTable, kBlock, true, 9, 0, 4, dense, absl::MakeSpan(small))
                .code(),
            absl::StatusCode::kDataLoss);
  absl::Status s =
      d.Take(kTable, kBlock, false, 8, 4, 5, "", absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("holds version 4 of epoch 9"));
  EXPECT_EQ(
      d.Take(kTable, kBlock, false, 9, 3, 5, "", absl::MakeSpan(out)).code(),
      absl::StatusCode::kDataLoss);
  s = d.Take(kTable, kBlock, false, 9, 4, 5, std::string(20, '\x7f'),
             absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  // Forgotten after a bad message: the next pull is dense.
  EXPECT_EQ(d.held(kTable, kBlock).epoch, 0u);
}

TEST(DecodeAddChainTest, AddsEveryMessageInOrder) {
  std::vector<float> r1 = {0, 2, 0, -2}, r2 = {1, 0, 0, 0};
  std::vector<int32_t> m1, m2;
  ASSERT_TRUE(EncodeThreshold(absl::MakeSpan(r1), 1.0f, 10, &m1).ok());
  ASSERT_TRUE(EncodeThreshold(absl::MakeSpan(r2), 1.0f, 10, &m2).ok());
  std::string chain;
  AppendMessageBytes(m1, &chain);
  AppendMessageBytes(m2, &chain);
  std::vector<float> target(4, 0.0f);
  ASSERT_TRUE(DecodeAddChain(chain, absl::MakeSpan(target)).ok());
  EXPECT_EQ(target, (std::vector<float>{1, 1, 0, -1}));
  // Cut short, or not a multiple of 4 bytes.
  EXPECT_FALSE(
      DecodeAddChain(chain.substr(0, chain.size() - 4), absl::MakeSpan(target))
          .ok());
  EXPECT_FALSE(DecodeAddChain("abc", absl::MakeSpan(target)).ok());
}

}  // namespace
}  // namespace shardps
