#include "common/auth/token_authority.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
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

TEST(TokenSha256HexTest, IsSha256InLowercaseHex) {
  // FIPS 180-2's first example, as `printf %s abc | sha256sum` prints it.
  EXPECT_EQ(TokenSha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(TokenAuthorityTest, PeerIdentitiesNameTheCallingPserver) {
  Write("a.token", "token-a");
  Write("peers",
        absl::StrCat("# address, SHA-256 of its token\n", "10.0.0.1:7164 ",
                     TokenSha256Hex("p1"), "\n", "10.0.0.2:7164\t",
                     absl::AsciiStrToUpper(TokenSha256Hex("p2")), "\n\n"));
  TokenAuthority::Options o;
  o.token_dir = dir_.path();
  o.peer_token = "p1";
  o.peer_identities_file = dir_.Path("peers");
  o.rescan_interval = absl::ZeroDuration();
  auto created = TokenAuthority::Create(o);
  ASSERT_TRUE(created.ok()) << created.status();
  TokenAuthority& auth = **created;
  std::string caller;
  ASSERT_TRUE(auth.Check("p2", "a", kPeer, &caller).ok());
  EXPECT_EQ(caller, "10.0.0.2:7164");
  ASSERT_TRUE(auth.Check("p1", "a", kPeer, &caller).ok());
  EXPECT_EQ(caller, "10.0.0.1:7164");
  EXPECT_EQ(auth.Check("p3", "a", kPeer).code(),
            absl::StatusCode::kUnauthenticated);
  absl::Status s = auth.Check("token-a", "a", kPeer);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("listed in --peer_identities_file="));
  EXPECT_THAT(auth.Check("p2", "a", kJob).message(),
              HasSubstr("between pservers only"));
  EXPECT_TRUE(auth.Check("token-a", "a", kJob).ok());
  EXPECT_THAT(auth.Describe(), HasSubstr("peer tokens of 2 pservers"));
  // A pserver added, another removed: in force at the next scan.
  Write("peers", absl::StrCat("10.0.0.1:7164 ", TokenSha256Hex("p1"), "\n",
                              "10.0.0.3:7164 ", TokenSha256Hex("p3"), "\n"));
  ASSERT_TRUE(auth.Check("p3", "a", kPeer, &caller).ok());
  EXPECT_EQ(caller, "10.0.0.3:7164");
  EXPECT_EQ(auth.Check("p2", "a", kPeer).code(),
            absl::StatusCode::kUnauthenticated);
  // A broken file: the identities read before stay.
  Write("peers", "10.0.0.1:7164 nothex\n");
  EXPECT_TRUE(auth.Check("p3", "a", kPeer).ok());
}

TEST_F(TokenAuthorityTest, BadIdentityFilesAreRefused) {
  Write("a.token", "token-a");
  TokenAuthority::Options o;
  o.token_dir = dir_.path();
  o.peer_identities_file = dir_.Path("peers");
  auto message = [&](const std::string& data) {
    Write("peers", data);
    return std::string(CreateStatus(o).message());
  };
  EXPECT_THAT(message(""), HasSubstr("needs --peer_token_file"));
  o.peer_token = "p1";
  const std::string p1 = "10.0.0.1:7164 " + TokenSha256Hex("p1") + "\n";
  EXPECT_THAT(message("10.0.0.2:7164 " + TokenSha256Hex("p2") + "\n"),
              HasSubstr("--peer_token_file's token is not listed (its "
                        "SHA-256 is " +
                        TokenSha256Hex("p1")));
  EXPECT_THAT(message(p1 + "10.0.0.2:7164\n"),
              HasSubstr("line 2: not \"<address> <SHA-256"));
  EXPECT_THAT(message(p1 + "10.0.0.2:7164 abc\n"), HasSubstr("line 2: not"));
  EXPECT_THAT(message(p1 + "10.0.0.1:7164 " + TokenSha256Hex("p2")),
              HasSubstr("line 2: 10.0.0.1:7164 is listed on line 1 too"));
  EXPECT_THAT(message(p1 + "10.0.0.2:7164 " + TokenSha256Hex("p1")),
              HasSubstr("the same token hash as 10.0.0.1:7164"));
  EXPECT_THAT(message(p1 + "10.0.0.2:7164 " + TokenSha256Hex("token-a")),
              HasSubstr("lists the hash of job a's token"));
  o.admin_token = "admin";
  EXPECT_THAT(message(p1 + "10.0.0.2:7164 " + TokenSha256Hex("admin")),
              HasSubstr("each role needs its own secret"));
  o.peer_identities_file = dir_.Path("missing");
  EXPECT_THAT(CreateStatus(o).message(),
              HasSubstr("--peer_identities_file=" + dir_.Path("missing") +
                        ": cannot open the file"));
}

}  // namespace
}  // namespace shardps
