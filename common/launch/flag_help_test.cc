#include "common/launch/flag_help.h"

#include <sstream>
#include <string>

#include "gflags/gflags.h"
#include "gtest/gtest.h"

DEFINE_int32(help_test_port, 7164,
             "the port of the help test, a description long enough to be "
             "wrapped over two lines of at most seventy-eight columns");
DEFINE_string(help_test_name, "job", "a grouped string flag");
DEFINE_bool(help_test_loose, false, "a flag no group names");

namespace shardps {
namespace {

std::string Help(const std::vector<FlagGroup>& groups) {
  std::ostringstream out;
  PrintFlagHelp("prog --help_test_port=N", groups, out);
  return out.str();
}

TEST(FlagHelpTest, GroupsFirstInOrderThenOthersThenLibraries) {
  std::string h =
      Help({{"Server", {"help_test_port"}}, {"Jobs", {"help_test_name"}}});
  EXPECT_EQ(h.rfind("usage: prog --help_test_port=N\n\nServer:\n", 0), 0u) << h;
  size_t port = h.find(
      "  --help_test_port=7164  (int32, "
      "SHARDPS_HELP_TEST_PORT)\n");
  size_t jobs = h.find(
      "\nJobs:\n  --help_test_name=\"job\"  (string, "
      "SHARDPS_HELP_TEST_NAME)\n      a grouped string flag\n");
  size_t other = h.find("\nOther flags:\n");
  size_t loose = h.find("  --help_test_loose=false  (bool,");
  ASSERT_NE(port, std::string::npos) << h;
  ASSERT_NE(jobs, std::string::npos) << h;
  ASSERT_NE(other, std::string::npos) << h;
  ASSERT_NE(loose, std::string::npos) << h;
  EXPECT_LT(port, jobs);
  EXPECT_LT(jobs, other);
  EXPECT_LT(other, loose);
  // The libraries' flags stay behind --helpfull.
  EXPECT_EQ(h.find("--logtostderr"), std::string::npos) << h;
  EXPECT_EQ(h.find("--flagfile="), std::string::npos) << h;
  EXPECT_NE(h.find("--helpfull"), std::string::npos) << h;
}

TEST(FlagHelpTest, DescriptionsWrapAt78Columns) {
  std::string h = Help({{"Server", {"help_test_port"}}});
  std::istringstream lines(h);
  std::string line;
  int wrapped = 0;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 78u) << line;
    if (line.rfind("      ", 0) == 0 &&
        line.find("port of the help") == std::string::npos) {
      ++wrapped;
    }
  }
  EXPECT_GE(wrapped, 1) << h;
}

TEST(FlagHelpTest, UndefinedFlagInAGroupIsAnErrorLine) {
  std::string h = Help({{"Server", {"no_such_flag_anywhere"}}});
  EXPECT_NE(h.find("  error: --no_such_flag_anywhere is named in --help but "
                   "not defined\n"),
            std::string::npos)
      << h;
}

TEST(FlagHelpTest, HelpRequested) {
  auto asked = [](std::vector<const char*> args) {
    args.insert(args.begin(), "prog");
    return HelpRequested(static_cast<int>(args.size()),
                         const_cast<char**>(args.data()));
  };
  EXPECT_TRUE(asked({"--help"}));
  EXPECT_TRUE(asked({"--port=1", "-h"}));
  EXPECT_TRUE(asked({"-helpshort"}));
  EXPECT_FALSE(asked({"--helpfull"}));
  EXPECT_FALSE(asked({"--helpxml"}));
  EXPECT_FALSE(asked({"--port=1"}));
  EXPECT_FALSE(asked({"--", "--help"}));
}

}  // namespace
}  // namespace shardps
