#include "tools/request_fuzzer.h"

#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "proto/ps_service.pb.h"
#include "proto/replication.pb.h"

namespace shardps {
namespace {

// What ps_fuzz sends: the trainers' service and the pservers'.
std::vector<const google::protobuf::ServiceDescriptor*> Services() {
  return {
      PushRequest::descriptor()->file()->FindServiceByName("ParameterServer"),
      ForwardRequest::descriptor()->file()->FindServiceByName("Replication")};
}

TEST(RequestFuzzerTest, CoversEveryMethodAndEveryKindOfDamage) {
  RequestFuzzer fuzzer(Services(), 1);
  std::set<std::string> paths;
  std::map<std::string, int> kinds;
  int parsed_valid = 0, valid = 0;
  for (int i = 0; i < 2000; ++i) {
    FuzzRequest q = fuzzer.Next();
    paths.insert(q.path);
    ++kinds[q.kind];
    if (std::string(q.kind) == "valid") {
      ++valid;
      std::unique_ptr<google::protobuf::Message> m(
          google::protobuf::MessageFactory::generated_factory()
              ->GetPrototype(q.method->input_type())
              ->New());
      parsed_valid += m->ParseFromString(q.bytes);
    }
  }
  EXPECT_EQ(static_cast<int>(paths.size()),
            Services()[0]->method_count() + Services()[1]->method_count());
  EXPECT_TRUE(paths.count("/shardps.ParameterServer/Push"));
  EXPECT_TRUE(paths.count("/shardps.Replication/Forward"));
  for (const char* k : {"valid", "truncated", "bit-flipped", "garbage"}) {
    EXPECT_GT(kinds[k], 50) << k;
  }
  // The undamaged ones are real requests of their method.
  EXPECT_EQ(parsed_valid, valid);
}

TEST(RequestFuzzerTest, OnlyTheMethodsAskedFor) {
  RequestFuzzer fuzzer(Services(), 1);
  absl::Status bad = fuzzer.OnlyMethods({"Push", "Pusj"});
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("shardps.ParameterServer and "
                               "shardps.Replication have no method Pusj; they "
                               "have InitJob,"),
            std::string::npos)
      << bad.message();
  ASSERT_TRUE(
      fuzzer.OnlyMethods({"Push", "OpenSharedMemory", "InstallUnit"}).ok());
  std::set<std::string> paths;
  for (int i = 0; i < 300; ++i) paths.insert(fuzzer.Next().path);
  EXPECT_EQ(paths,
            (std::set<std::string>{"/shardps.ParameterServer/Push",
                                   "/shardps.ParameterServer/OpenSharedMemory",
                                   "/shardps.Replication/InstallUnit"}));
}

TEST(RequestFuzzerTest, ReachesBoundariesAndRepeats) {
  RequestFuzzer fuzzer(Services(), 7);
  bool max_trainer = false, negative_step = false, many_blocks = false,
       repeated_block = false, nan_lr = false;
  for (int i = 0; i < 3000; ++i) {
    PullRequest pull;
    fuzzer.Fill(&pull, 4);
    max_trainer |= pull.trainer_id() == 2147483647;
    negative_step |= pull.step() < 0;
    many_blocks |= pull.blocks_size() > 100;
    repeated_block |=
        pull.blocks_size() > 1 && pull.blocks(0).SerializeAsString() ==
                                      pull.blocks(1).SerializeAsString();
    InitJobRequest init;
    fuzzer.Fill(&init, 4);
    for (const TableSpec& t : init.job().tables()) {
      nan_lr |= std::isnan(t.optimizer().learning_rate());
    }
  }
  EXPECT_TRUE(max_trainer);
  EXPECT_TRUE(negative_step);
  EXPECT_TRUE(many_blocks);
  EXPECT_TRUE(repeated_block);
  EXPECT_TRUE(nan_lr);
}

TEST(RequestFuzzerTest, SameSeedSameRequests) {
  RequestFuzzer a(Services(), 3);
  RequestFuzzer b(Services(), 3);
  for (int i = 0; i < 100; ++i) {
    FuzzRequest x = a.Next(), y = b.Next();
    EXPECT_EQ(x.path, y.path);
    EXPECT_EQ(x.bytes, y.bytes);
  }
}

}  // namespace
}  // namespace shardps
