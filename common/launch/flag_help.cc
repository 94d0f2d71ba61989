#include "common/launch/flag_help.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/launch/flags.h"
#include "gflags/gflags.h"

namespace shardps {
namespace {

constexpr size_t kWidth = 78;

// The flags of glog and gflags are the libraries'; every other flag of the
// binary is defined in ShardPS's own sources.
bool IsLibraryFlag(const gflags::CommandLineFlagInfo& f) {
  return absl::StrContains(f.filename, "gflags") ||
         absl::StartsWith(f.filename, "./src/") ||
         absl::StrContains(f.filename, "glog") ||
         // Debian's librocksdb.so holds its tools' flags (trace_analyzer,
         // block_cache_analyzer): none is ours.
         absl::StartsWith(f.filename, "./tools/");
}

// `text` as lines of at most kWidth columns, each starting with `indent`.
void Wrap(absl::string_view text, absl::string_view indent, std::ostream& out) {
  std::string line(indent);
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > kWidth) {
      out << line << "\n";
      line = std::string(indent);
    }
    if (line.size() > indent.size()) line += ' ';
    absl::StrAppend(&line, word);
  }
  if (line.size() > indent.size()) out << line << "\n";
}

void PrintFlag(const gflags::CommandLineFlagInfo& f, std::ostream& out) {
  std::string dflt = f.type == "string"
                         ? absl::StrCat("\"", f.default_value, "\"")
                         : f.default_value;
  out << "  --" << f.name << "=" << dflt << "  (" << f.type << ", "
      << EnvVarForFlag(f.name) << ")\n";
  Wrap(f.description, "      ", out);
}

}  // namespace

void PrintFlagHelp(absl::string_view usage,
                   const std::vector<FlagGroup>& groups, std::ostream& out) {
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  std::set<std::string> shown;
  out << "usage: " << usage << "\n";
  for (const FlagGroup& g : groups) {
    out << "\n" << g.title << ":\n";
    for (const std::string& name : g.flags) {
      auto it = std::find_if(all.begin(), all.end(),
                             [&](const auto& f) { return f.name == name; });
      if (it == all.end()) {
        out << "  error: --" << name << " is named in --help but not defined\n";
        continue;
      }
      PrintFlag(*it, out);
      shown.insert(name);
    }
  }
  bool other = false;
  for (const gflags::CommandLineFlagInfo& f : all) {
    if (IsLibraryFlag(f) || shown.count(f.name)) continue;
    if (!other) out << "\nOther flags:\n";
    other = true;
    PrintFlag(f, out);
  }
  out << "\nEvery flag can also be set as SHARDPS_<FLAG> in the environment "
         "(the command\nline wins). glog's and gflags' own flags (--v, "
         "--log_dir, --flagfile, ...):\n--helpfull.\n";
}

bool HelpRequested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--help" || a == "-help" || a == "-h" || a == "--helpshort" ||
        a == "-helpshort") {
      return true;
    }
    if (a == "--") break;
  }
  return false;
}

}  // namespace shardps
