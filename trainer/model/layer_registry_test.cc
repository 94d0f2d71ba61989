// The layer registry: every layer type of model_config.proto has a kind,
// and each kind plans shapes and tables and refuses bad configs.
#include "trainer/model/layer_registry.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"

namespace shardps {
namespace {

TEST(LayerRegistryTest, EveryTypeOfTheProtoHasAKindWithItsOwnPrefix) {
  const auto* types = LayerConfig::Type_descriptor();
  std::set<std::string> prefixes;
  for (int i = 0; i < types->value_count(); ++i) {
    const auto type = static_cast<LayerConfig::Type>(types->value(i)->number());
    const LayerKind* kind = FindLayerKind(type);
    ASSERT_NE(kind, nullptr) << types->value(i)->name();
    EXPECT_TRUE(prefixes.insert(kind->prefix).second) << kind->prefix;
  }
  EXPECT_EQ(FindLayerKind(static_cast<LayerConfig::Type>(99)), nullptr);
  EXPECT_TRUE(FindLayerKind(LayerConfig::CONV2D)->image);
  EXPECT_TRUE(FindLayerKind(LayerConfig::AVG_POOL)->image);
  EXPECT_FALSE(FindLayerKind(LayerConfig::FLATTEN)->image);
  EXPECT_TRUE(FindLayerKind(LayerConfig::FULLY_CONNECTED)->ends_dense);
  EXPECT_TRUE(FindLayerKind(LayerConfig::BIAS)->ends_dense);
  EXPECT_FALSE(FindLayerKind(LayerConfig::RELU)->ends_dense);
}

TEST(LayerRegistryTest, PlansShapesAndTables) {
  LayerConfig fc;
  fc.set_name("fc");
  fc.set_output_dim(5);
  auto p = FindLayerKind(LayerConfig::FULLY_CONNECTED)->plan(fc, {12, 1, 1});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->output.size(), 5);
  ASSERT_EQ(p->tables.size(), 2u);
  EXPECT_EQ(p->tables[0].first, ".weight");
  EXPECT_EQ(p->tables[0].second, (std::vector<int64_t>{12, 5}));
  EXPECT_EQ(p->tables[1].second, (std::vector<int64_t>{5}));

  LayerConfig conv;
  conv.set_name("conv");
  conv.set_filters(4);
  conv.set_kernel_size(3);
  conv.set_padding(1);
  p = FindLayerKind(LayerConfig::CONV2D)->plan(conv, {2, 8, 8});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->output.channels, 4);
  EXPECT_EQ(p->output.height, 8);
  EXPECT_EQ(p->tables[0].second, (std::vector<int64_t>{4, 2, 3, 3}));

  LayerConfig pool;
  pool.set_pool_size(2);
  p = FindLayerKind(LayerConfig::MAX_POOL)->plan(pool, {4, 8, 8});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->output.height, 4);
  EXPECT_TRUE(p->tables.empty());
}

TEST(LayerRegistryTest, RefusesBadConfigsNamingTheLayer) {
  LayerConfig fc;
  fc.set_name("head");
  EXPECT_EQ(FindLayerKind(LayerConfig::FULLY_CONNECTED)
                ->plan(fc, {3, 1, 1})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  LayerConfig drop;
  drop.set_name("d");
  drop.set_dropout_rate(1.0f);
  auto s = FindLayerKind(LayerConfig::DROPOUT)->plan(drop, {3, 1, 1}).status();
  EXPECT_NE(s.message().find("layer d: DROPOUT needs dropout_rate"),
            std::string::npos)
      << s;
  LayerConfig pool;
  pool.set_name("p");
  pool.set_pool_size(9);
  s = FindLayerKind(LayerConfig::AVG_POOL)->plan(pool, {1, 4, 4}).status();
  EXPECT_NE(s.message().find("does not fit its input"), std::string::npos) << s;
}

TEST(LayerRegistryTest, BuildsThePlannedLayer) {
  CpuBackend backend;
  LayerConfig fc;
  fc.set_name("fc");
  fc.set_output_dim(5);
  ParamBuffers params[2];
  auto layer = FindLayerKind(LayerConfig::FULLY_CONNECTED)
                   ->create(fc, {12, 1, 1}, 1, 0, &backend, params);
  EXPECT_EQ(layer->name(), "fc");
  EXPECT_EQ(layer->input_dim(), 12);
  EXPECT_EQ(layer->output_dim(), 5);
}

}  // namespace
}  // namespace shardps
