#ifndef SHARDPS_BASE_JOB_ID_H_
#define SHARDPS_BASE_JOB_ID_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace shardps {

// The job a request belongs to travels as call metadata under this key
// (`--job_id` on the trainer); a call without it belongs to kDefaultJobId.
inline constexpr char kJobMetadataKey[] = "shardps-job";
inline constexpr char kDefaultJobId[] = "default";

// Whether `name`, at the top of --checkpoint_dir, is one of the single-job
// layout's (GENERATION, ckpt-*: a pserver of before jobs wrote its
// checkpoints there, and moves them into the default job's folder at
// start): no job may take such a name.
inline bool IsSingleJobLayoutName(absl::string_view name) {
  return name == "GENERATION" || absl::StartsWith(name, "ckpt-");
}

// A job id is 1 to 64 of [A-Za-z0-9._-], not starting with '.', and not a
// name of the single-job layout: it names a folder under --checkpoint_dir.
inline absl::Status ValidateJobId(absl::string_view id) {
  bool ok = !id.empty() && id.size() <= 64 && id[0] != '.';
  for (char c : id) {
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                c == '.' || c == '_' || c == '-');
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("job id '", id.substr(0, 80),
                     "': 1 to 64 of A-Z a-z 0-9 . _ -, not starting with '.'"));
  }
  if (IsSingleJobLayoutName(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job id '", id,
        "' is reserved: GENERATION and ckpt-* are the names of checkpoints "
        "at the top of --checkpoint_dir"));
  }
  return absl::OkStatus();
}

}  // namespace shardps

#endif  // SHARDPS_BASE_JOB_ID_H_
