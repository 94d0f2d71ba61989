#include "trainer/network_advice.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;

NetworkPicture Picture(double pull, double push, int servers, int shared,
                       Compression c = Compression::kNone) {
  NetworkPicture p;
  p.pull_share = pull;
  p.push_share = push;
  p.wait_share = 0.05;
  p.servers = servers;
  p.shared_servers = shared;
  p.compression = c;
  return p;
}

TEST(NetworkAdviceTest, SaysTheShareAndLeavesASmallOneAlone) {
  EXPECT_EQ(NetworkAdvice(Picture(0.1, 0.1, 2, 0)),
            "pulls and pushes take 20% of the step (pull 10%, push 10%; "
            "waiting for the other trainers 5%); 0 of 2 pservers through "
            "shared memory: nothing to cut");
}

TEST(NetworkAdviceTest, DenseOverTheNetworkGetsCompressionAndTheLayout) {
  const std::string s = NetworkAdvice(Picture(0.4, 0.45, 1, 0));
  EXPECT_THAT(s, AllOf(HasSubstr("take 85% of the step"),
                       HasSubstr("--compression=bf16"),
                       HasSubstr("--compression=threshold"),
                       HasSubstr("a pserver beside each trainer")));
  // With a pserver already beside: compression only.
  EXPECT_THAT(NetworkAdvice(Picture(0.3, 0.3, 2, 1)),
              AllOf(HasSubstr("--compression=bf16"),
                    Not(HasSubstr("beside each trainer"))));
}

TEST(NetworkAdviceTest, EachCompressionGetsWhatIsLeft) {
  EXPECT_THAT(NetworkAdvice(Picture(0.3, 0.3, 2, 1, Compression::kBf16)),
              AllOf(HasSubstr("--compression=threshold"),
                    Not(HasSubstr("bf16 halves"))));
  NetworkPicture p = Picture(0.3, 0.3, 2, 1, Compression::kThreshold);
  p.compressed_pulls = false;
  EXPECT_THAT(NetworkAdvice(p), HasSubstr("--compressed_pulls"));
  p.compressed_pulls = true;
  EXPECT_THAT(NetworkAdvice(p), HasSubstr("already compressed both ways"));
}

TEST(NetworkAdviceTest, AllOnThisHostPointsAtThePservers) {
  EXPECT_THAT(NetworkAdvice(Picture(0.3, 0.3, 2, 2)),
              AllOf(HasSubstr("every pserver is on this host"),
                    Not(HasSubstr("--compression")),
                    EndsWith("\"Which layout and compression\")")));
}

}  // namespace
}  // namespace shardps
