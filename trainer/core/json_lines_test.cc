#include "trainer/core/json_lines.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(JsonLineTest, FormatsEveryType) {
  JsonLine l("eval");
  l.Add("pass", 2)
      .Add("loss", 0.1)
      .Add("name", "a\"b")
      .Add("bad", std::nan(""));
  EXPECT_EQ(l.str(),
            "{\"event\":\"eval\",\"pass\":2,\"loss\":0.10000000000000001,"
            "\"name\":\"a\\\"b\",\"bad\":null}");
}

TEST(MetricsWriterTest, AppendsLines) {
  const std::string path = ::testing::TempDir() + "/metrics_test.jsonl";
  std::remove(path.c_str());
  for (int i = 0; i < 2; ++i) {
    auto w = JsonLinesWriter::Open(path);
    ASSERT_TRUE(w.ok());
    (*w)->Write(JsonLine("step").Add("step", i));
  }
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(
      ss.str(),
      "{\"event\":\"step\",\"step\":0}\n{\"event\":\"step\",\"step\":1}\n");
}

TEST(MetricsWriterTest, UnwritablePathIsAnError) {
  auto w = JsonLinesWriter::Open("/nonexistent-dir/m.jsonl");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace shardps
