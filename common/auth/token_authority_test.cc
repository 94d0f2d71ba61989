#include "common/auth/token_authority.h"

#include <cstdio>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr auto kJob = CallClass::kJob;
constexpr auto kStatus = CallClass::kStatus;
constexpr auto kPeer = CallClass::kPeer;

class TokenAuthorityTest : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& data) {
    ASSERT_TRUE(
        testing::WriteStringToFile(Env::Default(), dir_.Path(name), data).ok());
  }
  std::unique_ptr<TokenAuthority> PerJob(std::string admin = "",
                                         std::string peer = "") {
    TokenAuthority::Options o;
    o.token_dir = dir_.path();
    o.admin_token = std::move(admin);
    o.peer_token = std::move(peer);
    o.rescan_interval = absl::ZeroDuration();
    auto a = TokenAuthority::Create(o);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *std::move(a) : nullptr;
  }
  absl::Status CreateStatus(TokenAuthority::Options o) {
    return TokenAuthority::Create(std::move(o)).status();
  }
  testing::ScopedTempDir dir_{"token_authority"};
};

TEST(ConstantTimeEqualsTest, Compares) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secreT", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("secretsecret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "secret"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST_F(TokenAuthorityTest, ASharedTokenCoversEveryJobAndThePeers) {
  TokenAuthority::Options o;
  o.shared_token = "shared";
  auto a = TokenAuthority::Create(o);
  ASSERT_TRUE(a.ok());
  for (CallClass c : {kJob, kStatus, kPeer}) {
    EXPECT_TRUE((*a)->Check("shared", "a", c).ok());
    EXPECT_TRUE((*a)->Check("shared", "anything", c).ok());
    EXPECT_EQ((*a)->Check("other", "a", c).code(),
              absl::StatusCode::kUnauthenticated);
    absl::Status none = (*a)->Check(std::nullopt, "a", c);
    EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(none.message(), HasSubstr("this pserver needs a token"));
  }
  EXPECT_EQ((*a)->Describe(), "token");
}

TEST_F(TokenAuthorityTest, APeerTokenTakesTheCallsBetweenPserversAlone) {
  TokenAuthority::Options o;
  o.shared_token = "shared";
  o.peer_token = "peer";
  auto a = TokenAuthority::Create(o);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*a)->Check("peer", "a", kPeer).ok());
  absl::Status trainer = (*a)->Check("shared", "a", kPeer);
  EXPECT_EQ(trainer.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(trainer.message(), HasSubstr("--peer_token_file"));
  EXPECT_EQ((*a)->Check("peer", "a", kJob).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ((*a)->Check("wrong", "a", kPeer).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(TokenAuthorityTest, AJobsTokenReachesItsJobOnly) {
  Write("a.token", "token-a\n");
  Write("b.token", "token-b");
  Write("README", "not a token file: ignored");
  auto auth = PerJob("admin", "peer");
  ASSERT_NE(auth, nullptr);
  EXPECT_THAT(auth->JobsWithTokens(), ElementsAre("a", "b"));
  EXPECT_TRUE(auth->Check("token-a", "a", kJob).ok());
  EXPECT_TRUE(auth->Check("token-a", "a", kStatus).ok());
  EXPECT_TRUE(auth->Check("token-b", "b", kJob).ok());
  // Job b, and a job that does not exist: the same answer.
  absl::Status b = auth->Check("token-a", "b", kJob);
  absl::Status c = auth->Check("token-a", "c", kJob);
  EXPECT_EQ(b.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(c.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(b.message(), "this token does not cover job 'b'");
  EXPECT_EQ(c.message(), "this token does not cover job 'c'");
  EXPECT_EQ(auth->Check("token-a", "b", kStatus).code(),
            absl::StatusCode::kPermissionDenied);
  // A trainer's token never makes the calls between pservers.
  EXPECT_EQ(auth->Check("token-a", "a", kPeer).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(auth->Check("peer", "a", kPeer).ok());
  EXPECT_EQ(auth->Check("token-", "a", kJob).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth->Check("", "a", kJob).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth->Describe(), "per-job tokens for 2 jobs in " + dir_.path() +
                                  ", an admin token, a peer token");
}

TEST_F(TokenAuthorityTest, TheAdminTokenReadsEveryJobsStatusOnly) {
  Write("a.token", "token-a");
  auto auth = PerJob("admin");
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Check("admin", "a", kStatus).ok());
  EXPECT_TRUE(auth->Check("admin", "no-such-job", kStatus).ok());
  absl::Status push = auth->Check("admin", "a", kJob);
  EXPECT_EQ(push.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(push.message(), HasSubstr("status"));
  EXPECT_EQ(auth->Check("admin", "a", kPeer).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(TokenAuthorityTest, WithoutAPeerTokenPerJobTokensMakeNoPeerCalls) {
  Write("a.token", "token-a");
  auto auth = PerJob();
  ASSERT_NE(auth, nullptr);
  absl::Status s = auth->Check("token-a", "a", kPeer);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("no --peer_token_file"));
}

TEST_F(TokenAuthorityTest, TokensAddedChangedAndRemovedTakeEffect) {
  Write("a.token", "token-a");
  auto auth = PerJob();
  ASSERT_NE(auth, nullptr);
  EXPECT_EQ(auth->Check("token-b", "b", kJob).code(),
            absl::StatusCode::kUnauthenticated);
  Write("b.token", "token-b");
  EXPECT_TRUE(auth->Check("token-b", "b", kJob).ok());
  Write("a.token", "token-a2");
  EXPECT_EQ(auth->Check("token-a", "a", kJob).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(auth->Check("token-a2", "a", kJob).ok());
  ASSERT_EQ(std::remove(dir_.Path("b.token").c_str()), 0);
  EXPECT_EQ(auth->Check("token-b", "b", kJob).code(),
            absl::StatusCode::kUnauthenticated);
  // A broken file: the tokens read before stay until it is fixed.
  Write("c.token", "");
  EXPECT_TRUE(auth->Check("token-a2", "a", kJob).ok());
  EXPECT_EQ(auth->Check("token-c", "c", kJob).code(),
            absl::StatusCode::kUnauthenticated);
  Write("c.token", "token-c");
  EXPECT_TRUE(auth->Check("token-c", "c", kJob).ok());
}

TEST_F(TokenAuthorityTest, BadDirectoriesAndSharedSecretsAreRefused) {
  TokenAuthority::Options o;
  o.token_dir = dir_.Path("missing");
  absl::Status s = CreateStatus(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--auth_token_dir="));
  EXPECT_THAT(s.message(), HasSubstr("cannot read the directory"));

  o.token_dir = dir_.path();
  o.shared_token = "shared";
  EXPECT_THAT(CreateStatus(o).message(), HasSubstr("give one"));
  o.shared_token.clear();

  Write("GENERATION.token", "token-g");
  s = CreateStatus(o);
  EXPECT_THAT(s.message(), HasSubstr("GENERATION.token"));
  EXPECT_THAT(s.message(), HasSubstr("reserved"));
  ASSERT_EQ(std::remove(dir_.Path("GENERATION.token").c_str()), 0);

  Write("a.token", "same");
  Write("b.token", "same");
  s = CreateStatus(o);
  EXPECT_THAT(s.message(), HasSubstr("b.token: the same token as a.token"));
  Write("b.token", "token-b");
  o.admin_token = "token-b";
  EXPECT_THAT(CreateStatus(o).message(),
              HasSubstr("each role needs its own secret"));
  o.admin_token.clear();

  Write("a.token", "two words");
  EXPECT_THAT(CreateStatus(o).message(), HasSubstr("printable ASCII"));

  TokenAuthority::Options shared;
  shared.shared_token = "t";
  shared.peer_token = "t";
  EXPECT_THAT(CreateStatus(shared).message(),
              HasSubstr("the trainers could then act as pservers"));
}

}  // namespace
}  // namespace shardps
