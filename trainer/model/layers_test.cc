// Forward and backward of every layer on the CPU backend against numerical
// gradients, and the image model end to end.
#include "trainer/model/layers.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"
#include "kernels/layer_functors.h"
#include "trainer/model/model.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f,
                          float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Distinct values at least 0.05 apart, in random order: no ties for max
// pooling, and far from ReLU's kink at 0 for a small enough step.
std::vector<float> Distinct(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.05f * (i + 1) - 0.025f * n;
  std::shuffle(v.begin(), v.end(), std::mt19937(seed));
  // Keep away from 0 (ReLU) by shifting the value closest to it.
  for (float& f : v) {
    if (std::fabs(f) < 0.02f) f += 0.011f;
  }
  return v;
}

// A layer under test with its parameters in host vectors.
struct Harness {
  std::unique_ptr<Layer> layer;
  std::vector<std::vector<float>> values, grads;  // per table
  std::vector<ParamBuffers> params;
  void Bind() {
    for (size_t t = 0; t < values.size(); ++t) {
      params[t] = ParamBuffers{values[t].data(), grads[t].data()};
    }
  }
};

// L = sum(out * r): dL/dout = r. Checks Backward's din and parameter
// gradients against central differences of L.
void CheckGradients(Harness* h, std::vector<float> x, int batch,
                    float step = 1e-2f, float tol = 2e-2f) {
  Layer* l = h->layer.get();
  ASSERT_EQ(x.size(), static_cast<size_t>(batch) * l->input_dim());
  const size_t out_n = static_cast<size_t>(batch) * l->output_dim();
  const std::vector<float> r = Random(out_n, 99);
  std::vector<float> out(out_n), din(x.size());
  h->Bind();
  auto loss = [&]() {
    std::vector<float> o(out_n);
    EXPECT_TRUE(l->Forward(x.data(), batch, /*training=*/false, o.data()).ok());
    double s = 0;
    for (size_t i = 0; i < out_n; ++i) s += static_cast<double>(o[i]) * r[i];
    return s;
  };
  ASSERT_TRUE(l->Forward(x.data(), batch, false, out.data()).ok());
  ASSERT_TRUE(
      l->Backward(x.data(), out.data(), r.data(), batch, din.data()).ok());
  auto check = [&](std::vector<float>* v, const std::vector<float>& analytic,
                   const std::string& what) {
    for (size_t i = 0; i < v->size(); ++i) {
      const float old = (*v)[i];
      (*v)[i] = old + step;
      const double up = loss();
      (*v)[i] = old - step;
      const double down = loss();
      (*v)[i] = old;
      const double numeric = (up - down) / (2.0 * step);
      EXPECT_NEAR(analytic[i], numeric, tol * std::max(1.0, std::fabs(numeric)))
          << l->name() << " " << what << "[" << i << "]";
    }
  };
  check(&x, din, "input");
  for (size_t t = 0; t < h->values.size(); ++t) {
    const std::vector<float> g = h->grads[t];
    check(&h->values[t], g, "param " + std::to_string(t));
  }
}

CpuBackend* Cpu() {
  static CpuBackend* backend = new CpuBackend(1);
  return backend;
}

Harness WithParams(std::vector<size_t> sizes, uint32_t seed) {
  Harness h;
  for (size_t n : sizes) {
    h.values.push_back(Random(n, seed++, -0.5f, 0.5f));
    h.grads.emplace_back(n, 0.0f);
  }
  h.params.resize(sizes.size());
  h.Bind();
  return h;
}

TEST(LayersTest, FullyConnectedGradients) {
  Harness h = WithParams({4 * 3, 3}, 1);
  h.layer = std::make_unique<FullyConnectedLayer>("fc", 4, 3, Cpu(),
                                                  &h.params[0], &h.params[1]);
  CheckGradients(&h, Random(2 * 4, 7), 2);
}

TEST(LayersTest, BiasGradients) {
  Harness h = WithParams({5}, 2);
  h.layer = std::make_unique<BiasLayer>("bias", 5, Cpu(), &h.params[0]);
  CheckGradients(&h, Random(3 * 5, 8), 3);
}

TEST(LayersTest, ActivationGradients) {
  for (LayerConfig::Type t :
       {LayerConfig::RELU, LayerConfig::SIGMOID, LayerConfig::TANH}) {
    Harness h;
    h.layer = std::make_unique<ActivationLayer>(LayerConfig::Type_Name(t),
                                                TensorShape{2, 2, 3}, t, Cpu());
    CheckGradients(&h, Distinct(2 * 12, 3), 2, 1e-3f);
  }
}

struct ConvCase {
  int in_c, h, w, filters, k, stride, padding;
};

class ConvGradientTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvGradientTest, MatchesNumericalGradient) {
  const ConvCase& c = GetParam();
  ConvGeometry g;
  g.in_channels = c.in_c;
  g.in_height = c.h;
  g.in_width = c.w;
  g.out_channels = c.filters;
  g.kernel_h = g.kernel_w = c.k;
  g.stride = c.stride;
  g.padding = c.padding;
  Harness h = WithParams({static_cast<size_t>(c.filters * c.in_c * c.k * c.k),
                          static_cast<size_t>(c.filters)},
                         4);
  h.layer = std::make_unique<Conv2dLayer>("conv", g, Cpu(), &h.params[0],
                                          &h.params[1]);
  EXPECT_EQ(h.layer->output_shape().height, g.out_height());
  const int batch = 2;
  CheckGradients(&h, Random(static_cast<size_t>(batch) * c.in_c * c.h * c.w, 9),
                 batch);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvGradientTest,
                         ::testing::Values(ConvCase{1, 5, 5, 2, 3, 1, 0},
                                           ConvCase{2, 5, 4, 3, 3, 1, 1},
                                           ConvCase{3, 6, 7, 2, 3, 2, 1},
                                           ConvCase{2, 4, 4, 1, 1, 1, 0},
                                           ConvCase{1, 7, 7, 2, 5, 2, 2}));

// The convolution against its definition, computed directly.
TEST(LayersTest, ConvForwardMatchesDefinition) {
  ConvGeometry g;
  g.batch = 2;
  g.in_channels = 2;
  g.in_height = 5;
  g.in_width = 6;
  g.out_channels = 3;
  g.kernel_h = g.kernel_w = 3;
  g.stride = 2;
  g.padding = 1;
  const std::vector<float> x = Random(2 * 2 * 5 * 6, 1);
  const std::vector<float> w = Random(3 * 2 * 9, 2);
  const std::vector<float> b = Random(3, 3);
  const int oh = g.out_height(), ow = g.out_width();
  ASSERT_EQ(oh, 3);
  ASSERT_EQ(ow, 3);
  std::vector<float> y(2 * 3 * oh * ow);
  ASSERT_TRUE(
      Cpu()->Conv2dForward(g, x.data(), w.data(), b.data(), y.data()).ok());
  for (int n = 0; n < 2; ++n) {
    for (int f = 0; f < 3; ++f) {
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          double want = b[f];
          for (int c = 0; c < 2; ++c) {
            for (int ky = 0; ky < 3; ++ky) {
              for (int kx = 0; kx < 3; ++kx) {
                const int iy = oy * 2 - 1 + ky, ix = ox * 2 - 1 + kx;
                if (iy < 0 || iy >= 5 || ix < 0 || ix >= 6) continue;
                want +=
                    static_cast<double>(x[((n * 2 + c) * 5 + iy) * 6 + ix]) *
                    w[((f * 2 + c) * 3 + ky) * 3 + kx];
              }
            }
          }
          EXPECT_NEAR(y[((n * 3 + f) * oh + oy) * ow + ox], want, 1e-5);
        }
      }
    }
  }
}

TEST(LayersTest, ConvUsesThreads) {
  ConvGeometry g;
  g.batch = 5;
  g.in_channels = 2;
  g.in_height = g.in_width = 6;
  g.out_channels = 4;
  g.kernel_h = g.kernel_w = 3;
  g.padding = 1;
  const std::vector<float> x = Random(5 * 2 * 36, 1), w = Random(4 * 18, 2),
                           b = Random(4, 3), dy = Random(5 * 4 * 36, 4);
  CpuBackend one(1), three(3);
  std::vector<float> y1(5 * 4 * 36), y3(y1.size()), dw1(w.size()),
      dw3(w.size()), db1(4), db3(4), dx1(x.size()), dx3(x.size());
  ASSERT_TRUE(
      one.Conv2dForward(g, x.data(), w.data(), b.data(), y1.data()).ok());
  ASSERT_TRUE(
      three.Conv2dForward(g, x.data(), w.data(), b.data(), y3.data()).ok());
  EXPECT_EQ(y1, y3);
  ASSERT_TRUE(one.Conv2dBackward(g, x.data(), w.data(), dy.data(), dw1.data(),
                                 db1.data(), dx1.data())
                  .ok());
  ASSERT_TRUE(three
                  .Conv2dBackward(g, x.data(), w.data(), dy.data(), dw3.data(),
                                  db3.data(), dx3.data())
                  .ok());
  EXPECT_EQ(dx1, dx3);
  EXPECT_EQ(db1, db3);
  for (size_t i = 0; i < dw1.size(); ++i) EXPECT_NEAR(dw1[i], dw3[i], 1e-5);
}

struct PoolCase {
  PoolMode mode;
  int c, h, w, window, stride, padding;
};

class PoolGradientTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolGradientTest, MatchesNumericalGradient) {
  const PoolCase& c = GetParam();
  PoolGeometry g;
  g.channels = c.c;
  g.in_height = c.h;
  g.in_width = c.w;
  g.window = c.window;
  g.stride = c.stride;
  g.padding = c.padding;
  g.mode = c.mode;
  Harness h;
  h.layer = std::make_unique<Pool2dLayer>("pool", g, Cpu());
  const int batch = 2;
  CheckGradients(&h, Distinct(static_cast<size_t>(batch) * c.c * c.h * c.w, 5),
                 batch, 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolGradientTest,
    ::testing::Values(PoolCase{PoolMode::kMax, 2, 4, 4, 2, 2, 0},
                      PoolCase{PoolMode::kMax, 1, 5, 5, 2, 2, 0},
                      PoolCase{PoolMode::kMax, 2, 5, 4, 3, 2, 1},
                      PoolCase{PoolMode::kAverage, 2, 4, 4, 2, 2, 0},
                      PoolCase{PoolMode::kAverage, 1, 5, 6, 3, 1, 1}));

TEST(LayersTest, MaxPoolValues) {
  PoolGeometry g;
  g.batch = 1;
  g.channels = 1;
  g.in_height = g.in_width = 4;
  const std::vector<float> x = {1, 2,  3,  4,  5,  6,  7,  8,
                                9, 10, 11, 12, 13, 14, 15, -16};
  std::vector<float> y(4), avg(4);
  ASSERT_TRUE(Cpu()->Pool2dForward(g, x.data(), y.data()).ok());
  EXPECT_EQ(y, (std::vector<float>{6, 8, 14, 15}));
  g.mode = PoolMode::kAverage;
  ASSERT_TRUE(Cpu()->Pool2dForward(g, x.data(), avg.data()).ok());
  EXPECT_EQ(avg, (std::vector<float>{3.5f, 5.5f, 11.5f, 5.5f}));
}

TEST(LayersTest, FlattenGradients) {
  Harness h;
  h.layer = std::make_unique<FlattenLayer>("flat", TensorShape{2, 3, 2}, Cpu());
  EXPECT_EQ(h.layer->output_shape().channels, 12);
  EXPECT_EQ(h.layer->output_shape().height, 1);
  CheckGradients(&h, Random(2 * 12, 6), 2);
}

TEST(LayersTest, DropoutIsDeterministicAndScaled) {
  const TensorShape shape{1000, 1, 1};
  DropoutLayer a("drop", shape, 0.25f, 42, Cpu());
  DropoutLayer b("drop", shape, 0.25f, 42, Cpu());
  DropoutLayer c("drop", shape, 0.25f, 43, Cpu());
  const std::vector<float> x(2000, 1.0f);
  std::vector<float> ya(2000), yb(2000), yc(2000), ya2(2000), eval(2000);
  ASSERT_TRUE(a.Forward(x.data(), 2, true, ya.data()).ok());
  ASSERT_TRUE(b.Forward(x.data(), 2, true, yb.data()).ok());
  ASSERT_TRUE(c.Forward(x.data(), 2, true, yc.data()).ok());
  EXPECT_EQ(ya, yb);  // same seed, same batch number
  EXPECT_NE(ya, yc);
  int dropped = 0;
  for (float v : ya) {
    if (v == 0.0f) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
    }
  }
  EXPECT_NEAR(dropped / 2000.0, 0.25, 0.04);
  // The next training batch gets another mask; evaluation is the identity
  // and does not advance the sequence.
  ASSERT_TRUE(a.Forward(x.data(), 2, false, eval.data()).ok());
  EXPECT_EQ(eval, x);
  ASSERT_TRUE(a.Forward(x.data(), 2, true, ya2.data()).ok());
  EXPECT_NE(ya, ya2);
  ASSERT_TRUE(b.Forward(x.data(), 2, true, yb.data()).ok());
  EXPECT_EQ(ya2, yb);
  // Backward uses the mask of the last training forward.
  const std::vector<float> dy = Random(2000, 3);
  std::vector<float> dx(2000);
  ASSERT_TRUE(a.Backward(x.data(), ya2.data(), dy.data(), 2, dx.data()).ok());
  for (size_t i = 0; i < dx.size(); ++i) {
    EXPECT_FLOAT_EQ(dx[i], dy[i] * ya2[i]);
  }
}

TEST(LayersTest, DropoutStreamsDifferAndReplay) {
  const TensorShape shape{1000, 1, 1};
  DropoutLayer a("drop", shape, 0.5f, 42, Cpu());
  const std::vector<float> x(1000, 1.0f);
  std::vector<float> t1(1000), t2(1000), again(1000);
  a.SetStream(1, 7);  // trainer 0 at step 7
  ASSERT_TRUE(a.Forward(x.data(), 1, true, t1.data()).ok());
  a.SetStream(2, 7);  // trainer 1 at step 7
  ASSERT_TRUE(a.Forward(x.data(), 1, true, t2.data()).ok());
  EXPECT_NE(t1, t2);
  a.SetStream(1, 7);  // trainer 0 redoing step 7 after a rollback
  ASSERT_TRUE(a.Forward(x.data(), 1, true, again.data()).ok());
  EXPECT_EQ(t1, again);
}

TEST(LayerFunctorsTest, DropoutMaskAndXentGrad) {
  // Golden bits: the CUDA kernels call the same functions.
  EXPECT_EQ(MixBits(1, 0), 0x910a2dec89025cc1ULL);
  EXPECT_EQ(DropoutMask(7, 3, 0.0f), 1.0f);
  int kept = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const float m = DropoutMask(7, i, 0.5f);
    EXPECT_TRUE(m == 0.0f || m == 2.0f);
    kept += m != 0.0f;
  }
  EXPECT_NEAR(kept / 10000.0, 0.5, 0.02);
  EXPECT_FLOAT_EQ(SoftmaxXentGrad(0.25f, true, 0.5f), -0.375f);
  EXPECT_FLOAT_EQ(SoftmaxXentGrad(0.25f, false, 0.5f), 0.125f);
  EXPECT_FLOAT_EQ(AveragePoolScale(2), 0.25f);
}

ModelConfig Parse(const std::string& text) {
  ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config))
      << text;
  return config;
}

constexpr char kSmallCnn[] = R"pb(
  layers { type: CONV2D filters: 3 kernel_size: 3 padding: 1 }
  layers { type: TANH }
  layers { type: MAX_POOL pool_size: 2 }
  layers { type: CONV2D filters: 2 kernel_size: 2 }
  layers { type: AVG_POOL pool_size: 2 stride: 1 }
  layers { type: FLATTEN }
  layers { type: FULLY_CONNECTED output_dim: 3 }
  loss { type: SOFTMAX_CROSS_ENTROPY }
  input_shape { channels: 2 height: 6 width: 6 }
)pb";

TEST(ImageModelTest, TablesShapesAndNames) {
  auto model = Model::Create(Parse(kSmallCnn), 72, 3);
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& t = (*model)->tables();
  ASSERT_EQ(t.size(), 6u);
  EXPECT_EQ(t[0].name, "conv0.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{3, 2, 3, 3}));
  EXPECT_EQ(t[1].name, "conv0.bias");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{2, 3, 2, 2}));
  // 6x6 -> conv 6x6 -> pool 3x3 -> conv 2x2 -> avg pool (stride 1) 1x1.
  EXPECT_EQ(t[4].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*model)->config().layers(2).name(), "maxpool2");
  EXPECT_EQ((*model)->config().layers(4).name(), "avgpool4");
  EXPECT_EQ((*model)->config().layers(5).name(), "flatten5");
}

// The whole image model: TrainBatch's gradients against central differences
// of the mean loss.
TEST(ImageModelTest, GradientsMatchNumerical) {
  auto created = Model::Create(Parse(kSmallCnn), 72, 3);
  ASSERT_TRUE(created.ok()) << created.status();
  Model* model = created->get();
  model->InitializeParameters(5);
  const int batch = 3;
  const std::vector<float> x = Random(batch * 72, 11);
  const std::vector<int32_t> labels = {0, 2, 1};
  ASSERT_TRUE(model->TrainBatch(x.data(), labels.data(), batch).ok());
  std::vector<std::vector<float>> grads;
  for (const ParamTable& t : model->tables()) grads.push_back(t.grad);
  const float step = 1e-3f;
  for (size_t t = 0; t < grads.size(); ++t) {
    std::vector<float>& v = model->tables()[t].value;
    for (size_t i = 0; i < v.size(); ++i) {
      const float old = v[i];
      v[i] = old + step;
      const double up =
          model->Evaluate(x.data(), labels.data(), batch)->loss_sum / batch;
      v[i] = old - step;
      const double down =
          model->Evaluate(x.data(), labels.data(), batch)->loss_sum / batch;
      v[i] = old;
      EXPECT_NEAR(grads[t][i], (up - down) / (2 * step), 2e-3)
          << model->tables()[t].name << "[" << i << "]";
    }
  }
}

TEST(ImageModelTest, DropoutOnlyInTraining) {
  const ModelConfig config = Parse(R"pb(
    layers { type: FULLY_CONNECTED output_dim: 8 }
    layers { type: DROPOUT dropout_rate: 0.5 }
    layers { type: FULLY_CONNECTED output_dim: 2 }
    loss { type: SOFTMAX_CROSS_ENTROPY }
    seed: 3
  )pb");
  auto a = Model::Create(config, 4, 2);
  auto b = Model::Create(config, 4, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->InitializeParameters(1);
  (*b)->InitializeParameters(1);
  const std::vector<float> x = Random(8, 2);
  const std::vector<int32_t> labels = {0, 1};
  // Evaluation is deterministic and the same for both.
  const double e1 = (*a)->Evaluate(x.data(), labels.data(), 2)->loss_sum;
  const double e2 = (*b)->Evaluate(x.data(), labels.data(), 2)->loss_sum;
  EXPECT_EQ(e1, e2);
  // Training batches follow the seed: the same sequence of masks.
  for (int step = 0; step < 3; ++step) {
    auto sa = (*a)->TrainBatch(x.data(), labels.data(), 2);
    auto sb = (*b)->TrainBatch(x.data(), labels.data(), 2);
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_EQ(sa->loss_sum, sb->loss_sum);
    EXPECT_EQ((*a)->tables()[0].grad, (*b)->tables()[0].grad);
  }
  EXPECT_EQ((*a)->Evaluate(x.data(), labels.data(), 2)->loss_sum, e1);
}

TEST(ImageModelTest, CreateErrorsNameTheLayer) {
  struct Case {
    std::string layers;
    std::string want;
  } cases[] = {
      {"layers { name: 'c' type: CONV2D kernel_size: 3 }",
       "layer c: CONV2D needs filters in [1, 2^20]"},
      {"layers { name: 'c' type: CONV2D filters: 2 }",
       "layer c: kernel_size 0"},
      {"layers { name: 'c' type: CONV2D filters: 2 kernel_size: 9 }",
       "layer c: kernel_size 9 with stride 1 and padding 0 does not fit its "
       "input 1x6x6"},
      {"layers { name: 'c' type: CONV2D filters: 2 kernel_size: 3 "
       "stride: -1 }",
       "layer c: kernel_size 3 with stride -1"},
      {"layers { name: 'p' type: MAX_POOL }", "layer p: pool_size 0"},
      {"layers { name: 'p' type: AVG_POOL pool_size: 2 padding: 2 }",
       "layer p: pool_size 2 with stride 2 and padding 2"},
      {"layers { name: 'd' type: DROPOUT dropout_rate: 1 }",
       "layer d: DROPOUT needs dropout_rate in [0, 1), got 1"},
      {"layers { name: 'd' type: DROPOUT dropout_rate: -0.1 }",
       "layer d: DROPOUT needs dropout_rate in [0, 1)"},
      {"layers { name: 'c' type: CONV2D filters: 2000000 kernel_size: 3 }",
       "layer c: CONV2D needs filters in [1, 2^20]"},
      {"layers { name: 'c' type: CONV2D filters: 4 kernel_size: 5000 }",
       "layer c: window 5000 or stride 0 exceeds 4096"},
      {"layers { name: 'c' type: CONV2D filters: 100000 kernel_size: 3 "
       "padding: 1 } layers { name: 'c2' type: CONV2D filters: 100000 "
       "kernel_size: 1 }",
       "layer c2: table c2.weight of shape 100000x100000x1x1 has more than"},
  };
  for (const Case& c : cases) {
    const ModelConfig config =
        Parse(c.layers +
              " layers { type: FULLY_CONNECTED output_dim: 2 }"
              " loss { type: SOFTMAX_CROSS_ENTROPY }");
    auto model = Model::Create(config, 36, 2);
    ASSERT_FALSE(model.ok()) << c.layers;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(), HasSubstr(c.want)) << c.layers;
  }
}

TEST(ImageModelTest, CreateErrorsOnTheInputShape) {
  // No square image without input_shape; an input_shape of the wrong size.
  auto not_square =
      Model::Create(Parse("layers { type: MAX_POOL pool_size: 2 } "
                          "layers { type: FULLY_CONNECTED output_dim: 2 }"),
                    30, 2);
  EXPECT_THAT(not_square.status().message(),
              HasSubstr("image layers need input_shape"));
  auto wrong =
      Model::Create(Parse("layers { type: FULLY_CONNECTED output_dim: 2 } "
                          "input_shape { channels: 2 height: 3 width: 3 }"),
                    30, 2);
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("input_shape 2x3x3 must be positive and multiply to "
                        "the input width 30"));
}

TEST(ImageModelTest, CreateErrorsOnALayerAfterTheOutput) {
  // Nothing but elementwise layers after the last FC layer.
  auto after =
      Model::Create(Parse("layers { type: FULLY_CONNECTED output_dim: 4 } "
                          "layers { type: MAX_POOL pool_size: 2 } "
                          "input_shape { channels: 1 height: 4 width: 4 }"),
                    16, 2);
  EXPECT_FALSE(after.ok());
}

TEST(ImageModelTest, ConfigFmnistCnnBuilds) {
  // configs/fmnist_cnn.pbtxt's layers on 28x28 images.
  auto model = Model::Create(
      Parse(R"pb(
        layers { type: CONV2D filters: 8 kernel_size: 3 padding: 1 }
        layers { type: RELU }
        layers { type: MAX_POOL pool_size: 2 }
        layers { type: CONV2D filters: 16 kernel_size: 3 padding: 1 }
        layers { type: RELU }
        layers { type: MAX_POOL pool_size: 2 }
        layers { type: FULLY_CONNECTED output_dim: 10 }
      )pb"),
      784, 10);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->tables()[4].shape,
            (std::vector<int64_t>{16 * 7 * 7, 10}));
  EXPECT_EQ((*model)->num_parameters(),
            8 * 9 + 8 + 16 * 72 + 16 + 784 * 10 + 10);
}

// The same CNN step on 1 and on 3 CPU threads (the pool of workers splits
// the examples; the filter gradients are summed per thread, so the order of
// additions differs and only rounding may).
TEST(ImageModelTest, ThreadsGiveTheSameStep) {
  const ModelConfig config = Parse(R"pb(
    layers { type: CONV2D filters: 4 kernel_size: 3 padding: 1 }
    layers { type: RELU }
    layers { type: AVG_POOL pool_size: 2 }
    layers { type: CONV2D filters: 6 kernel_size: 3 stride: 2 }
    layers { type: MAX_POOL pool_size: 2 stride: 1 }
    layers { type: FULLY_CONNECTED output_dim: 3 }
  )pb");
  auto one = Model::Create(config, 144, 3, std::make_unique<CpuBackend>(1));
  auto three = Model::Create(config, 144, 3, std::make_unique<CpuBackend>(3));
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(three.ok()) << three.status();
  (*one)->InitializeParameters(5);
  (*three)->InitializeParameters(5);
  const int batch = 7;
  const std::vector<float> x = Random(batch * 144, 11);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2, 1};
  for (int step = 0; step < 3; ++step) {  // the pool is reused
    auto a = (*one)->TrainBatch(x.data(), labels.data(), batch);
    auto b = (*three)->TrainBatch(x.data(), labels.data(), batch);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NEAR(a->loss_sum, b->loss_sum, 1e-4);
    for (size_t t = 0; t < (*one)->tables().size(); ++t) {
      const auto& ga = (*one)->tables()[t].grad;
      const auto& gb = (*three)->tables()[t].grad;
      ASSERT_EQ(ga.size(), gb.size());
      for (size_t i = 0; i < ga.size(); ++i) {
        ASSERT_NEAR(ga[i], gb[i], 1e-5f + 1e-4f * std::abs(ga[i]))
            << "table " << t << " value " << i << " step " << step;
      }
    }
  }
}

}  // namespace
}  // namespace shardps
