#ifndef SHARDPS_COMMON_LAUNCH_FLAG_HELP_H_
#define SHARDPS_COMMON_LAUNCH_FLAG_HELP_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardps {

// Flags shown together under a title in --help.
struct FlagGroup {
  std::string title;
  std::vector<std::string> flags;
};

// A program's --help: the usage line, then its own flags group by group
// (each with its type, default, SHARDPS_<FLAG> variable and description),
// then any other flag defined in ShardPS's sources that no group names,
// and last a pointer to --helpfull for glog's and gflags' own flags.
// `groups` must name only defined flags: a name that is not one is printed
// as an error line, so a test of the program's --help sees it.
void PrintFlagHelp(absl::string_view usage,
                   const std::vector<FlagGroup>& groups, std::ostream& out);

// True when argv asks for --help (or -help, -h, --helpshort): the caller
// prints PrintFlagHelp and exits 0. --helpfull, --helpxml and the others
// are left to gflags.
bool HelpRequested(int argc, char** argv);

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_FLAG_HELP_H_
