// The CUDA backend against the CPU backend, call by call. Needs a CUDA
// device: without one (or in a build without CUDA) every test is skipped
// with the reason, and ctest lists it as skipped.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "kernels/testing/cuda_test.h"

namespace shardps {
namespace {

using testing_cuda::CudaTest;
using testing_cuda::Random;

class CudaBackendTest : public CudaTest {
 protected:
  // Convolution forward and backward of `g` on random data (seeds `seed` to
  // `seed` + 3) on both backends.
  void ExpectConvolutionMatches(const ConvGeometry& g, uint32_t seed) {
    const size_t xn =
        static_cast<size_t>(g.batch) * g.in_channels * g.in_height * g.in_width;
    const size_t wn = static_cast<size_t>(g.out_channels) * g.in_channels *
                      g.kernel_h * g.kernel_w;
    const size_t yn = static_cast<size_t>(g.batch) * g.out_channels *
                      g.out_height() * g.out_width();
    const std::vector<float> x = Random(xn, seed), w = Random(wn, seed + 1),
                             b = Random(g.out_channels, seed + 2),
                             dy = Random(yn, seed + 3);
    std::vector<float> y(yn), dw(wn), db(g.out_channels), dx(xn);
    ASSERT_TRUE(
        cpu_.Conv2dForward(g, x.data(), w.data(), b.data(), y.data()).ok());
    ASSERT_TRUE(cpu_.Conv2dBackward(g, x.data(), w.data(), dy.data(), dw.data(),
                                    db.data(), dx.data())
                    .ok());
    BackendBuffer gx = Dev(x), gw = Dev(w), gb = Dev(b), gdy = Dev(dy),
                  gy = Zeros(yn), gdw = Zeros(wn), gdb = Zeros(g.out_channels),
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
    ExpectConvolutionMatches(g, 1);
  }
}

// The algorithms chosen for a geometry are kept: the same geometry again,
// after another one, on other data, still matches the CPU.
TEST_F(CudaBackendTest, ConvolutionRepeatsWithKeptAlgorithms) {
  ConvGeometry a;
  a.batch = 4;
  a.in_channels = 2;
  a.in_height = a.in_width = 10;
  a.out_channels = 5;
  a.kernel_h = a.kernel_w = 3;
  a.padding = 1;
  ConvGeometry b = a;
  b.batch = 2;  // another geometry between the two runs of `a`
  b.stride = 2;
  ExpectConvolutionMatches(a, 20);
  ExpectConvolutionMatches(b, 24);
  ExpectConvolutionMatches(a, 28);
}

// Uploads take the host data at once; queued downloads arrive at the next
// Synchronize or Download, also when the transfers overflow the staging
// arena (1 MiB at first) and it grows in between.
TEST_F(CudaBackendTest, QueuedDownloadsArriveAtSynchronize) {
  const size_t n = 200000;  // 800 kB: the second transfer overflows 1 MiB
  std::vector<std::vector<float>> want;
  std::vector<BackendBuffer> dev;
  for (uint32_t i = 0; i < 4; ++i) {
    std::vector<float> h = Random(n, 30 + i);
    want.push_back(h);
    dev.push_back(Zeros(n));
    ASSERT_TRUE(gpu_->Upload(h.data(), n, dev.back().data()).ok());
    std::fill(h.begin(), h.end(), -7.0f);  // after Upload: not seen
  }
  std::vector<std::vector<float>> got(4, std::vector<float>(n, -1.0f));
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(gpu_->DownloadAsync(dev[i].data(), n, got[i].data()).ok());
  }
  ASSERT_TRUE(gpu_->Synchronize().ok());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(want[i], got[i]) << i;

  std::vector<float> queued(n, -1.0f), direct(n, -1.0f);
  ASSERT_TRUE(gpu_->DownloadAsync(dev[2].data(), n, queued.data()).ok());
  ASSERT_TRUE(gpu_->Download(dev[3].data(), n, direct.data()).ok());
  EXPECT_EQ(want[2], queued);
  EXPECT_EQ(want[3], direct);
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

}  // namespace
}  // namespace shardps
