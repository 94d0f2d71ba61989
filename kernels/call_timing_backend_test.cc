#include "kernels/call_timing_backend.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"

namespace shardps {
namespace {

// A CPU backend whose matrix products fail.
class FailingGemm : public CpuBackend {
 public:
  absl::Status Gemm(bool, bool, int, int, int, float, const float*, int,
                    const float*, int, float, float*, int) override {
    return absl::InternalError("no products today");
  }
};

TEST(CallTimingBackendTest, ForwardsAndCountsCalls) {
  CallTimingBackend timed(std::make_unique<CpuBackend>());
  CpuBackend plain;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 2, 1, 0, 3};
  std::vector<float> want(4, 0.0f), got(4, 0.0f);
  ASSERT_TRUE(plain
                  .Gemm(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2,
                        0.0f, want.data(), 2)
                  .ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(timed
                    .Gemm(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2,
                          0.0f, got.data(), 2)
                    .ok());
  }
  EXPECT_EQ(want, got);
  ASSERT_TRUE(
      timed.ActivationForward(Activation::kRelu, a.data(), 6, got.data()).ok());
  const std::vector<CallTimingBackend::Calls> calls = timed.Report();
  ASSERT_EQ(calls.size(), 2u);
  int64_t gemm = 0, act = 0;
  for (const auto& c : calls) {
    if (c.name == "Gemm") gemm = c.count;
    if (c.name == "ActivationForward") act = c.count;
    EXPECT_GE(c.total, absl::ZeroDuration());
  }
  EXPECT_EQ(gemm, 3);
  EXPECT_EQ(act, 1);
  EXPECT_GE(calls[0].total, calls[1].total);  // longest first

  timed.Reset();
  timed.set_enabled(false);
  ASSERT_TRUE(timed
                  .Gemm(false, false, 2, 2, 3, 1.0f, a.data(), 3, b.data(), 2,
                        0.0f, got.data(), 2)
                  .ok());
  EXPECT_TRUE(timed.Report().empty());
  EXPECT_EQ(timed.name(), "cpu");
  EXPECT_TRUE(timed.host_memory());
}

TEST(CallTimingBackendTest, PassesErrorsOn) {
  CallTimingBackend timed(std::make_unique<FailingGemm>());
  float c = 0;
  const float one = 1;
  absl::Status s =
      timed.Gemm(false, false, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "no products today");
  ASSERT_EQ(timed.Report().size(), 1u);
  EXPECT_EQ(timed.Report()[0].count, 1);
}

}  // namespace
}  // namespace shardps
