// The CUDA backend against the CPU backend, call by call and for a whole
// training step, and the GPU threshold encoder against the CPU codec byte
// for byte. Needs a CUDA device: without one (or in a build without CUDA)
// every test is skipped with the reason, and ctest lists it as skipped.
#include "kernels/cuda_backend.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/threshold_codec.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "kernels/cuda_threshold_encoder.h"
#include "trainer/model.h"

namespace shardps {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Why there is no device, or "" when there is one.
std::string NoDevice() {
  absl::StatusOr<int> n = CudaDeviceCount();
  if (!n.ok()) return std::string(n.status().message());
  if (*n == 0) return "0 CUDA devices";
  return "";
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoDevice();
    if (!why.empty()) {
      std::cout << "no CUDA device, skipping: " << why << std::endl;
      GTEST_SKIP() << "no CUDA device: " << why;
    }
    auto b = CreateCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    gpu_ = std::move(b).value();
  }

  // A device copy of `host`.
  BackendBuffer Dev(const std::vector<float>& host) {
    BackendBuffer b;
    EXPECT_TRUE(b.Allocate(gpu_.get(), host.size()).ok());
    EXPECT_TRUE(gpu_->Upload(host.data(), host.size(), b.data()).ok());
    return b;
  }
  BackendBuffer Zeros(size_t n) {
    BackendBuffer b;
    EXPECT_TRUE(b.Allocate(gpu_.get(), n).ok());
    return b;
  }
  std::vector<float> Host(const BackendBuffer& b) {
    std::vector<float> h(b.size());
    EXPECT_TRUE(gpu_->Download(b.data(), b.size(), h.data()).ok());
    return h;
  }
  static void ExpectNear(const std::vector<float>& want,
                         const std::vector<float>& got, float tol,
                         const std::string& what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(want[i], got[i], tol * std::max(1.0f, std::fabs(want[i])))
          << what << "[" << i << "]";
    }
  }

  CpuBackend cpu_;
  std::unique_ptr<Backend> gpu_;
};

TEST_F(CudaBackendTest, Gemm) {
  const int m = 7, n = 5, k = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2),
                               c0 = Random(m * n, 3);
      std::vector<float> c = c0;
      const int lda = ta ? m : k, ldb = tb ? k : n;
      ASSERT_TRUE(cpu_.Gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb,
                            2.0f, c.data(), n)
                      .ok());
      BackendBuffer da = Dev(a), db = Dev(b), dc = Dev(c0);
      ASSERT_TRUE(gpu_->Gemm(ta, tb, m, n, k, 0.5f, da.data(), lda, db.data(),
                             ldb, 2.0f, dc.data(), n)
                      .ok());
      ExpectNear(c, Host(dc), 1e-5f, "gemm");
    }
  }
}

TEST_F(CudaBackendTest, BiasAndActivations) {
  const int outer = 3, channels = 4, inner = 5, n = outer * channels * inner;
  const std::vector<float> x = Random(n, 1), b = Random(channels, 2),
                           dy = Random(n, 3);
  std::vector<float> y(n), db(channels);
  ASSERT_TRUE(
      cpu_.BiasForward(b.data(), outer, channels, inner, x.data(), y.data())
          .ok());
  ASSERT_TRUE(
      cpu_.BiasBackward(dy.data(), outer, channels, inner, db.data()).ok());
  BackendBuffer dx = Dev(x), dbias = Dev(b), dyy = Zeros(n), ddy = Dev(dy),
                ddb = Zeros(channels);
  ASSERT_TRUE(gpu_->BiasForward(dbias.data(), outer, channels, inner, dx.data(),
                                dyy.data())
                  .ok());
  ASSERT_TRUE(
      gpu_->BiasBackward(ddy.data(), outer, channels, inner, ddb.data()).ok());
  ExpectNear(y, Host(dyy), 1e-6f, "bias forward");
  ExpectNear(db, Host(ddb), 1e-5f, "bias backward");
  for (Activation f :
       {Activation::kRelu, Activation::kSigmoid, Activation::kTanh}) {
    std::vector<float> fy(n), fdx(n);
    ASSERT_TRUE(cpu_.ActivationForward(f, x.data(), n, fy.data()).ok());
    ASSERT_TRUE(cpu_.ActivationBackward(f, x.data(), fy.data(), dy.data(), n,
                                        fdx.data())
                    .ok());
    BackendBuffer gy = Zeros(n), gdx = Zeros(n);
    ASSERT_TRUE(gpu_->ActivationForward(f, dx.data(), n, gy.data()).ok());
    ASSERT_TRUE(gpu_->ActivationBackward(f, dx.data(), gy.data(), ddy.data(), n,
                                         gdx.data())
                    .ok());
    ExpectNear(fy, Host(gy), 1e-5f, "activation forward");
    ExpectNear(fdx, Host(gdx), 1e-5f, "activation backward");
  }
}

TEST_F(CudaBackendTest, Convolution) {
  struct Case {
    int c, h, w, f, k, stride, pad;
  };
  for (const Case& c :
       {Case{1, 28, 28, 8, 3, 1, 1}, Case{8, 14, 14, 16, 3, 1, 1},
        Case{3, 9, 7, 4, 3, 2, 1}, Case{2, 6, 6, 3, 1, 1, 0}}) {
    ConvGeometry g;
    g.batch = 3;
    g.in_channels = c.c;
    g.in_height = c.h;
    g.in_width = c.w;
    g.out_channels = c.f;
    g.kernel_h = g.kernel_w = c.k;
    g.stride = c.stride;
    g.padding = c.pad;
    const size_t xn = static_cast<size_t>(g.batch) * c.c * c.h * c.w;
    const size_t wn = static_cast<size_t>(c.f) * c.c * c.k * c.k;
    const size_t yn =
        static_cast<size_t>(g.batch) * c.f * g.out_height() * g.out_width();
    const std::vector<float> x = Random(xn, 1), w = Random(wn, 2),
                             b = Random(c.f, 3), dy = Random(yn, 4);
    std::vector<float> y(yn), dw(wn), db(c.f), dx(xn);
    ASSERT_TRUE(
        cpu_.Conv2dForward(g, x.data(), w.data(), b.data(), y.data()).ok());
    ASSERT_TRUE(cpu_.Conv2dBackward(g, x.data(), w.data(), dy.data(), dw.data(),
                                    db.data(), dx.data())
                    .ok());
    BackendBuffer gx = Dev(x), gw = Dev(w), gb = Dev(b), gdy = Dev(dy),
                  gy = Zeros(yn), gdw = Zeros(wn), gdb = Zeros(c.f),
                  gdx = Zeros(xn);
    ASSERT_TRUE(
        gpu_->Conv2dForward(g, gx.data(), gw.data(), gb.data(), gy.data())
            .ok());
    ASSERT_TRUE(gpu_->Conv2dBackward(g, gx.data(), gw.data(), gdy.data(),
                                     gdw.data(), gdb.data(), gdx.data())
                    .ok());
    ExpectNear(y, Host(gy), 1e-4f, "conv forward");
    ExpectNear(dw, Host(gdw), 1e-4f, "conv filter gradient");
    ExpectNear(db, Host(gdb), 1e-4f, "conv bias gradient");
    ExpectNear(dx, Host(gdx), 1e-4f, "conv input gradient");
  }
}

TEST_F(CudaBackendTest, Pooling) {
  for (PoolMode mode : {PoolMode::kMax, PoolMode::kAverage}) {
    PoolGeometry g;
    g.batch = 2;
    g.channels = 3;
    g.in_height = 8;
    g.in_width = 6;
    g.mode = mode;
    const size_t xn = 2 * 3 * 8 * 6, yn = 2 * 3 * 4 * 3;
    const std::vector<float> x = Random(xn, 5), dy = Random(yn, 6);
    std::vector<float> y(yn), dx(xn);
    ASSERT_TRUE(cpu_.Pool2dForward(g, x.data(), y.data()).ok());
    ASSERT_TRUE(
        cpu_.Pool2dBackward(g, x.data(), y.data(), dy.data(), dx.data()).ok());
    BackendBuffer gx = Dev(x), gdy = Dev(dy), gy = Zeros(yn), gdx = Zeros(xn);
    ASSERT_TRUE(gpu_->Pool2dForward(g, gx.data(), gy.data()).ok());
    ASSERT_TRUE(
        gpu_->Pool2dBackward(g, gx.data(), gy.data(), gdy.data(), gdx.data())
            .ok());
    ExpectNear(y, Host(gy), 1e-6f, "pool forward");
    ExpectNear(dx, Host(gdx), 1e-6f, "pool backward");
  }
}

TEST_F(CudaBackendTest, DropoutMasksAreIdentical) {
  const size_t n = 10007;
  const std::vector<float> x = Random(n, 7), dy = Random(n, 8);
  std::vector<float> mask(n), y(n), dx(n);
  ASSERT_TRUE(
      cpu_.DropoutForward(0.3f, 99, x.data(), n, mask.data(), y.data()).ok());
  ASSERT_TRUE(cpu_.DropoutBackward(mask.data(), dy.data(), n, dx.data()).ok());
  BackendBuffer gx = Dev(x), gdy = Dev(dy), gm = Zeros(n), gy = Zeros(n),
                gdx = Zeros(n);
  ASSERT_TRUE(
      gpu_->DropoutForward(0.3f, 99, gx.data(), n, gm.data(), gy.data()).ok());
  ASSERT_TRUE(gpu_->DropoutBackward(gm.data(), gdy.data(), n, gdx.data()).ok());
  EXPECT_EQ(mask, Host(gm));  // the same functor, bit for bit
  EXPECT_EQ(y, Host(gy));
  EXPECT_EQ(dx, Host(gdx));
}

TEST_F(CudaBackendTest, Losses) {
  const int batch = 6, classes = 4;
  const std::vector<float> z = Random(batch * classes, 9, 3.0f);
  const std::vector<int32_t> labels = {0, 3, 2, 1, 7, 2};  // 7: invalid
  LossSums cs, gs;
  std::vector<float> cd(batch * classes), cp(batch * classes),
      gp(batch * classes);
  ASSERT_TRUE(cpu_.SoftmaxCrossEntropy(z.data(), labels.data(), batch, classes,
                                       0.5f, cd.data(), cp.data(), &cs)
                  .ok());
  BackendBuffer gz = Dev(z), gd = Zeros(batch * classes);
  ASSERT_TRUE(gpu_->SoftmaxCrossEntropy(gz.data(), labels.data(), batch,
                                        classes, 0.5f, gd.data(), gp.data(),
                                        &gs)
                  .ok());
  EXPECT_NEAR(cs.loss_sum, gs.loss_sum, 1e-4);
  EXPECT_EQ(cs.correct, gs.correct);
  ExpectNear(cd, Host(gd), 1e-5f, "softmax gradient");
  ExpectNear(cp, gp, 1e-5f, "softmax probabilities");
  const std::vector<int32_t> binary = {0, 1, 1, 0, 1, 0};
  LossSums cl, gl;
  std::vector<float> cld(batch), clp(batch), glp(batch);
  ASSERT_TRUE(cpu_.LogisticLoss(z.data(), binary.data(), batch, 1.0f,
                                cld.data(), clp.data(), &cl)
                  .ok());
  BackendBuffer gld = Zeros(batch);
  ASSERT_TRUE(gpu_->LogisticLoss(gz.data(), binary.data(), batch, 1.0f,
                                 gld.data(), glp.data(), &gl)
                  .ok());
  EXPECT_NEAR(cl.loss_sum, gl.loss_sum, 1e-5);
  EXPECT_EQ(cl.correct, gl.correct);
  ExpectNear(cld, Host(gld), 1e-6f, "logistic gradient");
  ExpectNear(clp, glp, 1e-6f, "logistic probabilities");
}

// configs/fmnist_cnn.pbtxt's layers plus dropout: one training step and an
// evaluation on each backend give the same loss and gradients.
TEST_F(CudaBackendTest, CnnTrainingStepMatchesCpu) {
  ModelConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        layers { type: CONV2D filters: 8 kernel_size: 3 padding: 1 }
        layers { type: RELU }
        layers { type: MAX_POOL pool_size: 2 }
        layers { type: CONV2D filters: 16 kernel_size: 3 padding: 1 }
        layers { type: TANH }
        layers { type: AVG_POOL pool_size: 2 }
        layers { type: FLATTEN }
        layers { type: DROPOUT dropout_rate: 0.2 }
        layers { type: FULLY_CONNECTED output_dim: 10 }
        loss { type: SOFTMAX_CROSS_ENTROPY }
        seed: 4
      )pb",
      &config));
  auto cpu = Model::Create(config, 784, 10);
  auto gpu = Model::Create(config, 784, 10, std::move(gpu_));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  (*cpu)->InitializeParameters(3);
  (*gpu)->InitializeParameters(3);
  const int batch = 16;
  std::vector<float> x = Random(batch * 784, 10);
  for (float& v : x) v = std::fabs(v);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 10;
  auto cs = (*cpu)->TrainBatch(x.data(), labels.data(), batch);
  auto gs = (*gpu)->TrainBatch(x.data(), labels.data(), batch);
  ASSERT_TRUE(cs.ok()) << cs.status();
  ASSERT_TRUE(gs.ok()) << gs.status();
  EXPECT_NEAR(cs->loss_sum, gs->loss_sum, 1e-3);
  for (size_t t = 0; t < (*cpu)->tables().size(); ++t) {
    ExpectNear((*cpu)->tables()[t].grad, (*gpu)->tables()[t].grad, 1e-3f,
               (*cpu)->tables()[t].name);
  }
  std::vector<float> cp(batch * 10), gp(batch * 10);
  auto ce = (*cpu)->Evaluate(x.data(), labels.data(), batch, cp.data());
  auto ge = (*gpu)->Evaluate(x.data(), labels.data(), batch, gp.data());
  ASSERT_TRUE(ce.ok() && ge.ok());
  EXPECT_NEAR(ce->loss_sum, ge->loss_sum, 1e-3);
  ExpectNear(cp, gp, 1e-4f, "probabilities");
}

// The GPU encoder's message and residual equal the CPU codec's, bit for bit.
TEST_F(CudaBackendTest, ThresholdEncoderMatchesCpuBytes) {
  auto enc = CudaThresholdEncoder::Create(0);
  ASSERT_TRUE(enc.ok()) << enc.status();
  struct Case {
    size_t n;
    float scale, threshold;
  };
  // Sparse (threshold format), dense (bitmap), ragged tails, nothing sent.
  for (const Case& c : {Case{100003, 1e-3f, 9.9e-4f}, Case{4099, 1.0f, 0.5f},
                        Case{17, 1.0f, 0.3f}, Case{1000, 1e-3f, 1.0f},
                        Case{1 << 20, 1.0f, 0.9999f}}) {
    std::vector<float> r = Random(c.n, static_cast<uint32_t>(c.n), c.scale);
    r[0] = -0.0f;
    BackendBuffer dr = Dev(r);
    std::vector<int32_t> want, got = {7};  // appended after what is there
    auto ci = EncodeThresholdOrBitmap(absl::MakeSpan(r), c.threshold, &want);
    auto gi = (*enc)->Encode(dr.data(), c.n, c.threshold, &got);
    ASSERT_TRUE(ci.ok() && gi.ok()) << gi.status();
    EXPECT_EQ(static_cast<int>(ci->kind), static_cast<int>(gi->kind));
    EXPECT_EQ(ci->selected, gi->selected);
    EXPECT_EQ(ci->encoded, gi->encoded);
    EXPECT_EQ(ci->bytes, gi->bytes);
    want.insert(want.begin(), 7);
    EXPECT_EQ(want, got) << "n " << c.n;
    const std::vector<float> gr = Host(dr);
    ASSERT_EQ(0, std::memcmp(r.data(), gr.data(), r.size() * sizeof(float)))
        << "residuals differ, n " << c.n;
  }
  std::vector<float> bad = {1.0f, NAN, 2.0f};
  BackendBuffer db = Dev(bad);
  std::vector<int32_t> out;
  auto info = (*enc)->Encode(db.data(), 3, 0.5f, &out);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(static_cast<int>(info->kind),
            static_cast<int>(EncodeInfo::Kind::kNonFinite));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE((*enc)->Encode(db.data(), 3, 0.0f, &out).ok());
}

}  // namespace
}  // namespace shardps
