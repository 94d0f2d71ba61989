#include "common/launch/launch_env.h"

#include <map>
#include <memory>
#include <string>

#include "gflags/gflags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

DEFINE_string(alias_test_pservers, "", "a test flag");
DEFINE_int32(alias_test_port, 7164, "a test flag");
DEFINE_int32(alias_test_count, 1, "a test flag");

namespace shardps {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

GetEnvFn Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(vars);
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// Kubeflow TFJob's TF_CONFIG for a worker of 1 chief, 2 workers and 2 ps.
constexpr char kTfWorker1[] = R"({
  "cluster": {"chief": ["c-0:2222"], "worker": ["w-0:2222", "w-1:2222"],
              "ps": ["ps-0:7164", "ps-1:7165"]},
  "task": {"type": "worker", "index": 1},
  "environment": "cloud"})";

MATCHER_P2(IsAlias, flag, value, "") {
  return arg.flag == flag && arg.value == value;
}

TEST(LaunchEnvTest, TfConfigGivesATrainerItsPserversIdAndCount) {
  auto env = Env({{"TF_CONFIG", kTfWorker1}});
  auto aliases = LaunchAliases(env, LaunchRole::kTrainer);
  ASSERT_TRUE(aliases.ok()) << aliases.status();
  EXPECT_THAT(*aliases,
              ElementsAre(IsAlias("pservers", "ps-0:7164,ps-1:7165")));
  SchedulerRank rank;
  ASSERT_TRUE(LaunchRank(env, &rank).ok());
  EXPECT_EQ(rank.rank, 2);  // after the chief and worker 0
  EXPECT_EQ(rank.size, 3);
  EXPECT_EQ(rank.source, "TF_CONFIG");

  auto chief = Env({{"TF_CONFIG",
                     R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]},
                         "task": {"type": "chief", "index": 0}})"}});
  ASSERT_TRUE(LaunchRank(chief, &rank).ok());
  EXPECT_EQ(rank.rank, 0);
  EXPECT_EQ(rank.size, 2);
  // Without a chief, worker k is trainer k.
  auto worker = Env({{"TF_CONFIG",
                      R"({"cluster": {"worker": ["a:1", "b:1"]},
                          "task": {"type": "worker", "index": 1}})"}});
  ASSERT_TRUE(LaunchRank(worker, &rank).ok());
  EXPECT_EQ(rank.rank, 1);
  EXPECT_EQ(rank.size, 2);
}

TEST(LaunchEnvTest, TfConfigGivesAPsTaskItsPortAndTheTrainerCount) {
  auto env = Env({{"TF_CONFIG",
                   R"({"cluster": {"chief": ["c-0:2222"],
                                   "worker": ["w-0:2222", "w-1:2222"],
                                   "ps": ["ps-0:7164", "ps-1:7165"]},
                       "task": {"type": "ps", "index": 1}})"}});
  auto aliases = LaunchAliases(env, LaunchRole::kPserver);
  ASSERT_TRUE(aliases.ok()) << aliases.status();
  EXPECT_THAT(*aliases, ElementsAre(IsAlias("port", "7165"),
                                    IsAlias("num_gradient_servers", "3")));
  // A ps task is no trainer.
  SchedulerRank rank;
  EXPECT_THAT(std::string(LaunchRank(env, &rank).message()),
              HasSubstr("task type 'ps' is no trainer"));
}

TEST(LaunchEnvTest, BadTfConfigIsAnErrorNamingIt) {
  for (const char* bad :
       {"{not json", R"({"cluster": {"ps": "a:1"}})",
        R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 3}})",
        R"({"cluster": {"ps": ["a"]}, "task": {"type": "ps", "index": 0}})",
        R"({"task": {"type": "worker", "index": -1}})"}) {
    auto env = Env({{"TF_CONFIG", bad}});
    auto p = LaunchAliases(env, LaunchRole::kPserver);
    SchedulerRank rank;
    absl::Status r = LaunchRank(env, &rank);
    EXPECT_TRUE(!p.ok() || !r.ok()) << bad;
    EXPECT_THAT(std::string((!p.ok() ? p.status() : r).message()),
                HasSubstr("TF_CONFIG"))
        << bad;
  }
}

TEST(LaunchEnvTest, PaddleV1VariablesAsTheClusterGuideSetsThem) {
  auto env = Env({{"PADDLE_INIT_PORT", "7164"},
                  {"PADDLE_INIT_PSERVERS", "10.0.0.1, 10.0.0.2"},
                  {"PADDLE_INIT_TRAINER_ID", "1"},
                  {"PADDLE_INIT_NUM_GRADIENT_SERVERS", "2"},
                  {"PADDLE_INIT_USE_GPU", "0"},
                  {"PADDLE_INIT_TRAINER_COUNT", "4"}});
  auto trainer = LaunchAliases(env, LaunchRole::kTrainer);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  EXPECT_THAT(
      *trainer,
      ElementsAre(IsAlias("pservers", "10.0.0.1:7164,10.0.0.2:7164"),
                  IsAlias("use_gpu", "false"), IsAlias("num_threads", "4")));
  SchedulerRank rank;
  ASSERT_TRUE(LaunchRank(env, &rank).ok());
  EXPECT_EQ(rank.rank, 1);
  EXPECT_EQ(rank.size, 2);
  auto pserver = LaunchAliases(env, LaunchRole::kPserver);
  ASSERT_TRUE(pserver.ok());
  EXPECT_THAT(*pserver, ElementsAre(IsAlias("port", "7164"),
                                    IsAlias("num_gradient_servers", "2")));

  for (auto [var, value] :
       std::map<std::string, std::string>{{"PADDLE_INIT_PORT", "http"},
                                          {"PADDLE_INIT_USE_GPU", "maybe"},
                                          {"PADDLE_INIT_TRAINER_COUNT", "0"}}) {
    auto bad = LaunchAliases(Env({{var, value}}), LaunchRole::kTrainer);
    ASSERT_FALSE(bad.ok()) << var;
    EXPECT_THAT(std::string(bad.status().message()), HasSubstr(var));
  }
  EXPECT_FALSE(LaunchRank(Env({{"PADDLE_INIT_TRAINER_ID", "-1"}}), &rank).ok());
}

TEST(LaunchEnvTest, AliasesAreTheLowestPrecedence) {
  FLAGS_alias_test_pservers = "";
  gflags::SetCommandLineOption("alias_test_port", "9000");  // "given"
  ASSERT_TRUE(ApplyFlagAliases({{"alias_test_pservers", "a:1,b:2", "TF_CONFIG"},
                                {"alias_test_port", "7165", "TF_CONFIG"}})
                  .ok());
  EXPECT_EQ(FLAGS_alias_test_pservers, "a:1,b:2");
  EXPECT_EQ(FLAGS_alias_test_port, 9000);
  // Of two sources for one flag, the first wins.
  ASSERT_TRUE(
      ApplyFlagAliases({{"alias_test_pservers", "c:3", "PADDLE_INIT_PSERVERS"}})
          .ok());
  EXPECT_EQ(FLAGS_alias_test_pservers, "a:1,b:2");
  // A value the flag does not take names the variable it came from.
  absl::Status bad = ApplyFlagAliases(
      {{"alias_test_count", "x", "PADDLE_INIT_TRAINER_COUNT"}});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()),
              HasSubstr("PADDLE_INIT_TRAINER_COUNT: 'x' is not a valid value "
                        "for --alias_test_count"));
}

}  // namespace
}  // namespace shardps
