#include "common/launch/flags.h"

#include <map>
#include <string>
#include <vector>

#include "gflags/gflags.h"
#include "gtest/gtest.h"

DEFINE_int32(test_port, 7164, "a test flag");
DEFINE_string(test_name, "default", "a test flag");

namespace shardps {
namespace {

GetEnvFn FakeEnv(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(vars);
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FLAGS_test_port = 7164;
    FLAGS_test_name = "default";
  }
  absl::Status Parse(std::vector<std::string> args, const GetEnvFn& env) {
    args.insert(args.begin(), "prog");
    storage_ = args;
    ptrs_.clear();
    for (auto& a : storage_) ptrs_.push_back(a.data());
    int argc = static_cast<int>(ptrs_.size());
    char** argv = ptrs_.data();
    return ParseFlagsWithEnv(&argc, &argv, env);
  }
  std::vector<std::string> storage_;
  std::vector<char*> ptrs_;
};

TEST_F(FlagsTest, LocalRankForTheGpu) {
  int r = -1;
  ASSERT_TRUE(DetectLocalRank(FakeEnv({}), &r).ok());
  EXPECT_EQ(r, 0);
  ASSERT_TRUE(DetectLocalRank(FakeEnv({{"SLURM_LOCALID", "3"}}), &r).ok());
  EXPECT_EQ(r, 3);
  ASSERT_TRUE(DetectLocalRank(FakeEnv({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"SLURM_LOCALID", "3"}}),
                              &r)
                  .ok());
  EXPECT_EQ(r, 1);
  absl::Status s =
      DetectLocalRank(FakeEnv({{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}}), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("OMPI_COMM_WORLD_LOCAL_RANK=x"),
            std::string::npos);
}

TEST_F(FlagsTest, EnvVarNames) {
  EXPECT_EQ(EnvVarForFlag("num_gradient_servers"),
            "SHARDPS_NUM_GRADIENT_SERVERS");
}

TEST_F(FlagsTest, EnvironmentFillsUnsetFlags) {
  ASSERT_TRUE(Parse({}, FakeEnv({{"SHARDPS_TEST_PORT", "9000"}})).ok());
  EXPECT_EQ(FLAGS_test_port, 9000);
  EXPECT_EQ(FLAGS_test_name, "default");
}

TEST_F(FlagsTest, CommandLineBeatsEnvironment) {
  ASSERT_TRUE(
      Parse({"--test_port=1234"}, FakeEnv({{"SHARDPS_TEST_PORT", "9000"},
                                           {"SHARDPS_TEST_NAME", "env"}}))
          .ok());
  EXPECT_EQ(FLAGS_test_port, 1234);
  EXPECT_EQ(FLAGS_test_name, "env");
}

TEST_F(FlagsTest, BadEnvironmentValueNamesTheVariable) {
  absl::Status s = Parse({}, FakeEnv({{"SHARDPS_TEST_PORT", "abc"}}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("SHARDPS_TEST_PORT=abc"), std::string::npos);
  EXPECT_NE(s.message().find("--test_port"), std::string::npos);
}

TEST_F(FlagsTest, UnknownFlagOrBadValueIsAnErrorNotAnExit) {
  absl::Status s = Parse({"--no_such_flag=1"}, FakeEnv({}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown flag --no_such_flag"), std::string::npos);
  s = Parse({"--test_port=abc"}, FakeEnv({}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--test_port=abc"), std::string::npos) << s;
  EXPECT_EQ(FLAGS_test_port, 7164);  // the check changed nothing
  s = Parse({"--test_port"}, FakeEnv({}));
  EXPECT_NE(s.message().find("missing its value"), std::string::npos) << s;
  ASSERT_TRUE(Parse({"--test_port", "99"}, FakeEnv({})).ok());
  EXPECT_EQ(FLAGS_test_port, 99);
}

TEST(SchedulerRankTest, OpenMpiFirst) {
  SchedulerRank r;
  ASSERT_TRUE(DetectSchedulerRank(FakeEnv({{"OMPI_COMM_WORLD_RANK", "3"},
                                           {"OMPI_COMM_WORLD_SIZE", "8"},
                                           {"SLURM_PROCID", "1"}}),
                                  &r)
                  .ok());
  EXPECT_EQ(*r.rank, 3);
  EXPECT_EQ(*r.size, 8);
}

TEST(SchedulerRankTest, EachLauncher) {
  const std::vector<std::map<std::string, std::string>> cases = {
      {{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}},
      {{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}},
      {{"RANK", "2"}, {"WORLD_SIZE", "4"}},  // torchrun
  };
  for (const auto& c : cases) {
    SchedulerRank r;
    ASSERT_TRUE(DetectSchedulerRank(FakeEnv(c), &r).ok());
    EXPECT_EQ(*r.rank, 2);
    EXPECT_EQ(*r.size, 4);
  }
  SchedulerRank k8s;
  ASSERT_TRUE(
      DetectSchedulerRank(FakeEnv({{"JOB_COMPLETION_INDEX", "5"}}), &k8s).ok());
  EXPECT_EQ(*k8s.rank, 5);
  EXPECT_FALSE(k8s.size.has_value());
}

TEST(SchedulerRankTest, SlurmBeforeTorchrun) {
  SchedulerRank r;
  ASSERT_TRUE(DetectSchedulerRank(FakeEnv({{"RANK", "0"},
                                           {"WORLD_SIZE", "1"},
                                           {"SLURM_PROCID", "3"},
                                           {"SLURM_NTASKS", "4"}}),
                                  &r)
                  .ok());
  EXPECT_EQ(*r.rank, 3);
  EXPECT_EQ(r.source, "SLURM_PROCID/SLURM_NTASKS");
}

TEST(LocalRankTest, Torchrun) {
  int local = -1;
  ASSERT_TRUE(DetectLocalRank(FakeEnv({{"LOCAL_RANK", "1"}}), &local).ok());
  EXPECT_EQ(local, 1);
  absl::Status s = DetectLocalRank(FakeEnv({{"LOCAL_RANK", "-1"}}), &local);
  EXPECT_NE(s.message().find("LOCAL_RANK=-1"), std::string::npos) << s;
}

TEST(SchedulerRankTest, NoneAndBad) {
  SchedulerRank r;
  ASSERT_TRUE(DetectSchedulerRank(FakeEnv({}), &r).ok());
  EXPECT_FALSE(r.rank.has_value());
  absl::Status s = DetectSchedulerRank(FakeEnv({{"PMI_RANK", "x"}}), &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("PMI_RANK"), std::string::npos);
}

}  // namespace
}  // namespace shardps
