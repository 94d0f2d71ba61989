#include "trainer/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

ModelConfig ParseConfig(const std::string& text) {
  ModelConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config))
      << text;
  return config;
}

std::unique_ptr<Model> MustCreate(const ModelConfig& config, int input_dim,
                                  int num_classes) {
  auto model = Model::Create(config, input_dim, num_classes);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(model).value() : nullptr;
}

std::vector<float> RandomVector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

double MeanLoss(Model* model, const std::vector<float>& x,
                const std::vector<int32_t>& labels) {
  const int batch = static_cast<int>(labels.size());
  return model->Evaluate(x.data(), labels.data(), batch)->loss_sum / batch;
}

struct GradCase {
  std::string activation;  // RELU, SIGMOID or TANH
  std::string loss;        // SOFTMAX_CROSS_ENTROPY or LOGISTIC
};

class GradientCheckTest : public ::testing::TestWithParam<GradCase> {};

// Central differences on every parameter against TrainBatch's gradient.
TEST_P(GradientCheckTest, MatchesNumericalGradient) {
  const GradCase& c = GetParam();
  const bool logistic = c.loss == "LOGISTIC";
  const int input_dim = 5, num_classes = logistic ? 2 : 3;
  const int batch = 4;
  ModelConfig config = ParseConfig(
      "layers { type: FULLY_CONNECTED output_dim: 4 "
      "  bias_init { type: UNIFORM value: 0.5 } } "
      "layers { type: " +
      c.activation +
      " } "
      "layers { type: FULLY_CONNECTED output_dim: 3 "
      "  bias_init { type: UNIFORM value: 0.5 } } "
      "layers { type: " +
      c.activation +
      " } "
      "layers { type: FULLY_CONNECTED output_dim: " +
      std::to_string(logistic ? 1 : num_classes) + "} loss { type: " + c.loss +
      " }");
  auto model = MustCreate(config, input_dim, num_classes);
  ASSERT_NE(model, nullptr);
  model->InitializeParameters(3);
  const std::vector<float> x = RandomVector(batch * input_dim, 11, 2.0f);
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % num_classes;

  auto stats = model->TrainBatch(x.data(), labels.data(), batch);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->count, batch);
  EXPECT_NEAR(stats->loss_sum / batch, MeanLoss(model.get(), x, labels), 1e-6);

  const float h = 1e-2f;
  int checked = 0;
  double max_abs_grad = 0.0;
  for (ParamTable& table : model->tables()) {
    const std::vector<float> grad = table.grad;
    for (size_t i = 0; i < table.value.size(); ++i) {
      max_abs_grad = std::max(max_abs_grad, std::fabs(double{grad[i]}));
      const float saved = table.value[i];
      table.value[i] = saved + h;
      const double plus = MeanLoss(model.get(), x, labels);
      table.value[i] = saved - h;
      const double minus = MeanLoss(model.get(), x, labels);
      table.value[i] = saved;
      const double numeric = (plus - minus) / (2.0 * h);
      EXPECT_NEAR(grad[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << table.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, model->num_parameters());
  EXPECT_GT(max_abs_grad, 1e-2);  // the check is not vacuous
}

INSTANTIATE_TEST_SUITE_P(
    ActivationsAndLosses, GradientCheckTest,
    ::testing::Values(GradCase{"RELU", "SOFTMAX_CROSS_ENTROPY"},
                      GradCase{"SIGMOID", "SOFTMAX_CROSS_ENTROPY"},
                      GradCase{"TANH", "SOFTMAX_CROSS_ENTROPY"},
                      GradCase{"RELU", "LOGISTIC"},
                      GradCase{"SIGMOID", "LOGISTIC"},
                      GradCase{"TANH", "LOGISTIC"}),
    [](const ::testing::TestParamInfo<GradCase>& info) {
      return info.param.activation + "_" + info.param.loss;
    });

// A BIAS layer (logistic regression on a 1-wide input): its gradient and
// the gradient with respect to the input, against central differences.
TEST(ModelTest, BiasLayerGradients) {
  ModelConfig config = ParseConfig(
      "layers { type: BIAS bias_init { type: CONSTANT value: 0.3 } } "
      "loss { type: LOGISTIC }");
  auto model = MustCreate(config, 1, 2);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->tables().size(), 1u);
  EXPECT_EQ(model->tables()[0].name, "bias0.bias");
  model->InitializeParameters(1);
  EXPECT_FLOAT_EQ(model->tables()[0].value[0], 0.3f);
  std::vector<float> x = {0.5f, -1.0f, 2.0f};
  const std::vector<int32_t> labels = {1, 0, 1};
  std::vector<float> dx(3);
  ASSERT_TRUE(model->TrainBatch(x.data(), labels.data(), 3, dx.data()).ok());
  const float db = model->tables()[0].grad[0];
  const float h = 1e-3f;
  float& b = model->tables()[0].value[0];
  b += h;
  const double plus = MeanLoss(model.get(), x, labels);
  b -= 2 * h;
  const double minus = MeanLoss(model.get(), x, labels);
  b += h;
  EXPECT_NEAR(db, (plus - minus) / (2 * h), 1e-4);
  for (int i = 0; i < 3; ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double up = MeanLoss(model.get(), x, labels);
    x[i] = saved - h;
    const double down = MeanLoss(model.get(), x, labels);
    x[i] = saved;
    EXPECT_NEAR(dx[i], (up - down) / (2 * h), 1e-4) << i;
  }
}

TEST(ModelTest, TablesAndDefaultNames) {
  auto model = MustCreate(
      ParseConfig(
          "layers { type: FULLY_CONNECTED output_dim: 8 } "
          "layers { type: RELU } "
          "layers { name: 'out' type: FULLY_CONNECTED output_dim: 10 }"),
      784, 10);
  ASSERT_NE(model, nullptr);
  const auto& t = model->tables();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].name, "fc0.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{784, 8}));
  EXPECT_EQ(t[1].name, "fc0.bias");
  EXPECT_EQ(t[1].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(t[2].name, "out.weight");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(t[3].name, "out.bias");
  EXPECT_EQ(t[3].layer->name(), "out");
  EXPECT_EQ(t[0].value.size(), t[0].grad.size());
  EXPECT_EQ(model->config().layers(1).name(), "relu1");
  EXPECT_EQ(model->num_parameters(), 784 * 8 + 8 + 8 * 10 + 10);
  EXPECT_EQ(model->output_dim(), 10);
}

TEST(ModelTest, LayerHooksSeeEachLayersTablesInOrder) {
  const ModelConfig config = ParseConfig(
      "layers { type: FULLY_CONNECTED output_dim: 8 } "
      "layers { type: RELU } "
      "layers { name: 'out' type: FULLY_CONNECTED output_dim: 3 }");
  auto hooked = MustCreate(config, 5, 3);
  auto plain = MustCreate(config, 5, 3);
  ASSERT_NE(hooked, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(hooked->layer_tables(),
            (std::vector<std::vector<int>>{{0, 1}, {}, {2, 3}}));
  hooked->InitializeParameters(3);
  plain->InitializeParameters(3);
  std::vector<float> x(4 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 7);
  const std::vector<int32_t> labels = {0, 1, 2, 1};
  std::vector<std::string> calls;
  // A layer's gradient is final when after_backward sees it.
  std::vector<std::vector<float>> seen(4);
  Model::LayerHooks hooks;
  hooks.before_forward = [&](const std::vector<int>& tables) {
    calls.push_back(absl::StrCat("forward ", tables[0]));
    return absl::OkStatus();
  };
  hooks.after_backward = [&](const std::vector<int>& tables) {
    calls.push_back(absl::StrCat("backward ", tables[0]));
    for (int t : tables) seen[t] = hooked->tables()[t].grad;
    return absl::OkStatus();
  };
  ASSERT_TRUE(
      hooked->TrainBatch(x.data(), labels.data(), 4, nullptr, &hooks).ok());
  ASSERT_TRUE(plain->TrainBatch(x.data(), labels.data(), 4).ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"forward 0", "forward 2",
                                             "backward 2", "backward 0"}));
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(seen[t], plain->tables()[t].grad) << "table " << t;
    EXPECT_EQ(hooked->tables()[t].grad, plain->tables()[t].grad);
  }
  // An error of a hook ends the batch with it.
  hooks.before_forward = [](const std::vector<int>&) {
    return absl::UnavailableError("pull failed");
  };
  EXPECT_EQ(
      hooked->TrainBatch(x.data(), labels.data(), 4, nullptr, &hooks).status(),
      absl::UnavailableError("pull failed"));
}

TEST(ModelTest, CreateErrors) {
  struct Case {
    std::string config;
    int num_classes;
    std::string message;
  } cases[] = {
      {"layers { type: FULLY_CONNECTED output_dim: 0 }", 10, "layer fc0"},
      {"layers { name: 'h' type: FULLY_CONNECTED output_dim: -3 }", 10,
       "layer h"},
      {"layers { type: RELU }", 10, "FULLY_CONNECTED"},
      {"", 10, "FULLY_CONNECTED"},
      {"layers { type: FULLY_CONNECTED output_dim: 4 } "
       "layers { type: FULLY_CONNECTED output_dim: 10 } layers { type: RELU }",
       3, "layer fc1"},
      {"layers { type: FULLY_CONNECTED output_dim: 2 } "
       "loss { type: LOGISTIC }",
       2, "layer fc0"},
      {"layers { type: FULLY_CONNECTED output_dim: 1 } "
       "loss { type: LOGISTIC }",
       10, "LOGISTIC"},
      {"layers { name: 'a' type: FULLY_CONNECTED output_dim: 4 } "
       "layers { name: 'a' type: FULLY_CONNECTED output_dim: 10 }",
       10, "layer a"},
  };
  for (const Case& c : cases) {
    auto model = Model::Create(ParseConfig(c.config), 5, c.num_classes);
    ASSERT_FALSE(model.ok()) << c.config;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(), HasSubstr(c.message)) << c.config;
  }
  EXPECT_EQ(Model::Create(ParseConfig("layers { type: FULLY_CONNECTED "
                                      "output_dim: 10 }"),
                          0, 10)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, RejectsLabelsOutOfRange) {
  auto model = MustCreate(
      ParseConfig("layers { type: FULLY_CONNECTED output_dim: 3 }"), 2, 3);
  ASSERT_NE(model, nullptr);
  const float x[4] = {1, 2, 3, 4};
  const int32_t bad_high[2] = {0, 3};
  const int32_t bad_low[2] = {-1, 0};
  for (const int32_t* labels : {bad_high, bad_low}) {
    auto stats = model->TrainBatch(x, labels, 2);
    EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto logistic =
      MustCreate(ParseConfig("layers { type: FULLY_CONNECTED output_dim: 1 } "
                             "loss { type: LOGISTIC }"),
                 2, 2);
  ASSERT_NE(logistic, nullptr);
  const int32_t two[2] = {0, 2};
  EXPECT_EQ(logistic->TrainBatch(x, two, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int32_t ok[2] = {1, 0};
  EXPECT_TRUE(logistic->TrainBatch(x, ok, 2).ok());
  EXPECT_EQ(model->TrainBatch(x, ok, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, InitializationIsDeterministic) {
  const ModelConfig config = ParseConfig(
      "layers { type: FULLY_CONNECTED output_dim: 16 } layers { type: TANH } "
      "layers { type: FULLY_CONNECTED output_dim: 4 "
      "  weight_init { type: HE_UNIFORM } "
      "  bias_init { type: CONSTANT value: 0.25 } }");
  auto a = MustCreate(config, 8, 4);
  auto b = MustCreate(config, 8, 4);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  a->InitializeParameters(7);
  b->InitializeParameters(7);
  for (size_t t = 0; t < a->tables().size(); ++t) {
    const auto& va = a->tables()[t].value;
    const auto& vb = b->tables()[t].value;
    ASSERT_EQ(va.size(), vb.size());
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0)
        << a->tables()[t].name;
  }
  // Defaults: biases 0 for fc0, 0.25 where configured; weights within the
  // Xavier / He limits and not all equal.
  for (float v : a->tables()[1].value) EXPECT_EQ(v, 0.0f);
  for (float v : a->tables()[3].value) EXPECT_EQ(v, 0.25f);
  const float xavier = std::sqrt(6.0f / (8 + 16));
  for (float v : a->tables()[0].value) EXPECT_LE(std::fabs(v), xavier);
  const float he = std::sqrt(6.0f / 16);
  for (float v : a->tables()[2].value) EXPECT_LE(std::fabs(v), he);
  EXPECT_NE(a->tables()[0].value[0], a->tables()[0].value[1]);
  // Tables with the same shape still differ (the table index is mixed in).
  EXPECT_NE(a->tables()[0].value[0], a->tables()[2].value[0]);

  b->InitializeParameters(8);
  EXPECT_NE(a->tables()[0].value, b->tables()[0].value);
  EXPECT_NE(a->tables()[2].value, b->tables()[2].value);
}

TEST(ModelTest, InitializationGoldenValues) {
  // Pins the generator: a change here changes every job's initial model.
  auto model =
      MustCreate(ParseConfig("layers { type: FULLY_CONNECTED output_dim: 2 "
                             "weight_init { type: UNIFORM value: 1 } }"),
                 2, 2);
  ASSERT_NE(model, nullptr);
  model->InitializeParameters(1);
  const auto& w = model->tables()[0].value;
  ASSERT_EQ(w.size(), 4u);
  // Every value is (2u - 1) * 1 with u = k / 2^24, so 2^23 * (w + 1) is an
  // integer.
  for (float v : w) {
    const double scaled = (static_cast<double>(v) + 1.0) * 8388608.0;
    EXPECT_EQ(scaled, std::floor(scaled));
  }
  EXPECT_EQ(w[0], 0.064930439f);
  EXPECT_EQ(w[1], 0.785397053f);
  EXPECT_EQ(w[2], 0.780991673f);
  EXPECT_EQ(w[3], 0.110638142f);
}

TEST(ModelTest, EvaluateProbabilitiesAndAccuracy) {
  auto model =
      MustCreate(ParseConfig("layers { type: FULLY_CONNECTED output_dim: 1 } "
                             "loss { type: LOGISTIC }"),
                 1, 2);
  ASSERT_NE(model, nullptr);
  model->tables()[0].value = {2.0f};   // w
  model->tables()[1].value = {-1.0f};  // b: z = 2x - 1
  const float x[4] = {0.0f, 1.0f, 0.5f, 3.0f};
  const int32_t labels[4] = {0, 0, 1, 1};
  float p[4];
  BatchStats stats = *model->Evaluate(x, labels, 4, p);
  EXPECT_EQ(stats.count, 4);
  // p = sigmoid(-1), sigmoid(1), 0.5, sigmoid(5); 0.5 counts as class 1.
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(p[1], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_FLOAT_EQ(p[2], 0.5f);
  EXPECT_EQ(stats.correct, 3);
  const double want = std::log1p(std::exp(-1.0)) + std::log1p(std::exp(1.0)) +
                      std::log(2.0) + std::log1p(std::exp(-5.0));
  EXPECT_NEAR(stats.loss_sum, want, 1e-5);

  auto softmax = MustCreate(
      ParseConfig("layers { type: FULLY_CONNECTED output_dim: 3 }"), 1, 3);
  ASSERT_NE(softmax, nullptr);
  softmax->tables()[0].value = {0.0f, 0.0f, 0.0f};
  softmax->tables()[1].value = {1000.0f, 0.0f, -1000.0f};  // stable?
  const int32_t l3[1] = {2};
  float probs[3];
  stats = *softmax->Evaluate(x, l3, 1, probs);
  EXPECT_NEAR(stats.loss_sum, 2000.0, 1e-3);
  EXPECT_EQ(stats.correct, 0);
  EXPECT_FLOAT_EQ(probs[0], 1.0f);
  EXPECT_FLOAT_EQ(probs[2], 0.0f);
}

// Two Gaussian blobs per class in 4-D; plain SGD on an MLP gets the loss low.
TEST(ModelTest, SgdLearnsSeparableProblem) {
  for (const char* loss : {"SOFTMAX_CROSS_ENTROPY", "LOGISTIC"}) {
    const bool logistic = std::string(loss) == "LOGISTIC";
    const int num_classes = logistic ? 2 : 3, dim = 4, n = 96;
    auto model = MustCreate(
        ParseConfig(std::string("layers { type: FULLY_CONNECTED output_dim: 16 "
                                "weight_init { type: HE_UNIFORM } } "
                                "layers { type: RELU } "
                                "layers { type: FULLY_CONNECTED output_dim: ") +
                    (logistic ? "1" : "3") + " } loss { type: " + loss + " }"),
        dim, num_classes);
    ASSERT_NE(model, nullptr);
    model->InitializeParameters(5);
    std::mt19937 rng(3);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    std::vector<float> x(n * dim);
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) {
      labels[i] = i % num_classes;
      for (int d = 0; d < dim; ++d) {
        x[i * dim + d] = (d == labels[i] ? 2.0f : 0.0f) + noise(rng);
      }
    }
    const int batch = 16;
    double first = 0.0, last = 0.0;
    for (int epoch = 0; epoch < 60; ++epoch) {
      for (int b = 0; b < n / batch; ++b) {
        auto stats =
            model->TrainBatch(&x[b * batch * dim], &labels[b * batch], batch);
        ASSERT_TRUE(stats.ok()) << stats.status();
        for (ParamTable& t : model->tables()) {
          for (size_t i = 0; i < t.value.size(); ++i) {
            t.value[i] -= 0.1f * t.grad[i];
          }
        }
      }
      const BatchStats eval = *model->Evaluate(x.data(), labels.data(), n);
      (epoch == 0 ? first : last) = eval.loss_sum / n;
      if (epoch == 59) {
        EXPECT_EQ(eval.correct, n) << loss;
      }
    }
    EXPECT_LT(last, 0.05) << loss;
    EXPECT_LT(last, first) << loss;
  }
}

TEST(ModelTest, BatchSizesCanChange) {
  auto model =
      MustCreate(ParseConfig("layers { type: FULLY_CONNECTED output_dim: 3 } "
                             "layers { type: SIGMOID } "
                             "layers { type: FULLY_CONNECTED output_dim: 2 }"),
                 3, 2);
  ASSERT_NE(model, nullptr);
  model->InitializeParameters(1);
  const std::vector<float> x = RandomVector(8 * 3, 1);
  const std::vector<int32_t> labels = {0, 1, 1, 0, 1, 0, 0, 1};
  // The first 2 examples alone give the same loss whether the model saw a
  // bigger batch before or not.
  const BatchStats small1 = *model->Evaluate(x.data(), labels.data(), 2);
  ASSERT_TRUE(model->TrainBatch(x.data(), labels.data(), 8).ok());
  const BatchStats small2 = *model->Evaluate(x.data(), labels.data(), 2);
  EXPECT_DOUBLE_EQ(small1.loss_sum, small2.loss_sum);
  // Per-example losses add up.
  double sum = 0.0;
  for (int i = 0; i < 8; ++i) {
    sum += model->Evaluate(&x[i * 3], &labels[i], 1)->loss_sum;
  }
  EXPECT_NEAR(sum, model->Evaluate(x.data(), labels.data(), 8)->loss_sum, 1e-5);
}

}  // namespace
}  // namespace shardps
