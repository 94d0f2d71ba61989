#include "pserver/replication/view_state_file.h"

#include <string>

#include "common/storage/fault_injection_env.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

AcceptorState Sample() {
  AcceptorState s;
  s.committed = View{4, {0, 2, 3}, {}, {}};
  s.promised = Ballot{9, 2};
  s.accepted = Ballot{8, 1};
  s.accepted_view = View{5, {0, 2}, {}, {}};
  return s;
}

void ExpectSame(const AcceptorState& a, const AcceptorState& b) {
  EXPECT_EQ(a.committed, b.committed);
  EXPECT_EQ(a.promised, b.promised);
  EXPECT_EQ(a.accepted.has_value(), b.accepted.has_value());
  if (a.accepted && b.accepted) EXPECT_EQ(*a.accepted, *b.accepted);
  EXPECT_EQ(a.accepted_view, b.accepted_view);
}

TEST(ViewStateFileTest, SavedStateComesBack) {
  testing::ScopedTempDir dir("view_state");
  const std::string path = dir.Path("view_state");
  Env* env = Env::Default();
  EXPECT_TRUE(absl::IsNotFound(LoadAcceptorState(env, path).status()));
  ASSERT_TRUE(SaveAcceptorState(env, path, Sample()).ok());
  auto loaded = LoadAcceptorState(env, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSame(*loaded, Sample());
  // Nothing accepted, empty views.
  AcceptorState empty;
  ASSERT_TRUE(SaveAcceptorState(env, path, empty).ok());
  loaded = LoadAcceptorState(env, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSame(*loaded, empty);
}

TEST(ViewStateFileTest, DamagedFilesAreDataLoss) {
  testing::ScopedTempDir dir("view_state");
  const std::string path = dir.Path("view_state");
  Env* env = Env::Default();
  ASSERT_TRUE(SaveAcceptorState(env, path, Sample()).ok());
  std::string bytes;
  ASSERT_TRUE(env->ReadFileToString(path, &bytes).ok());
  auto write = [&](const std::string& b) {
    auto f = env->NewWritableFile(path);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(b).ok());
    ASSERT_TRUE((*f)->Close().ok());
  };
  for (size_t cut :
       {size_t{0}, size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    write(bytes.substr(0, cut));
    absl::Status s = LoadAcceptorState(env, path).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << "cut at " << cut << ": " << s;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {  // every single-byte flip
    std::string flipped = bytes;
    flipped[i] ^= 0x10;
    write(flipped);
    absl::Status s = LoadAcceptorState(env, path).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << "byte " << i << ": " << s;
  }
}

TEST(ViewStateFileTest, AFailedSaveLeavesThePreviousState) {
  testing::ScopedTempDir dir("view_state");
  const std::string path = dir.Path("view_state");
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAcceptorState(&env, path, Sample()).ok());
  AcceptorState next = Sample();
  next.promised = Ballot{10, 0};
  env.FailNth(FaultOp::kRename, 1, absl::InternalError("crash"));
  EXPECT_FALSE(SaveAcceptorState(&env, path, next).ok());
  auto loaded = LoadAcceptorState(&env, path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSame(*loaded, Sample());
}

}  // namespace
}  // namespace shardps
