#include "trainer/recovery_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

absl::StatusOr<RecoveryPlan> PlanRecovery(
    const std::vector<GetStatusResponse>& statuses,
    const std::vector<std::string>& addresses) {
  RecoveryPlan plan;
  if (statuses.empty()) return plan;
  uint64_t g = 0;
  bool same = true;
  int64_t lowest = INT64_MAX, highest = 0;
  for (const GetStatusResponse& r : statuses) {
    g = std::max<uint64_t>(g, r.generation());
    same = same && r.generation() == statuses[0].generation() &&
           r.base_step() == statuses[0].base_step();
    lowest = std::min(lowest, r.min_version());
    highest = std::max(highest, r.max_version());
  }
  // In sync mode the pservers' versions differ by at most one step; more
  // means one lost its state without a new timeline.
  if (same && highest - lowest <= 1) {
    plan.generation = g;
    return plan;
  }
  // The pservers disagree (one restarted from its checkpoint): every one
  // rolls back to the newest checkpoint they all hold.
  std::vector<int64_t> common(statuses[0].checkpoint_steps().begin(),
                              statuses[0].checkpoint_steps().end());
  std::vector<std::string> held;
  for (size_t s = 0; s < statuses.size(); ++s) {
    const GetStatusResponse& r = statuses[s];
    const auto& steps = r.checkpoint_steps();
    held.push_back(absl::StrCat(
        s < addresses.size() ? addresses[s] : absl::StrCat("pserver ", s),
        " generation ", r.generation(), " from step ", r.base_step(),
        " at versions ", r.min_version(), "-", r.max_version(),
        ", checkpoints [", absl::StrJoin(steps, ","), "]"));
    std::vector<int64_t> keep;
    for (int64_t c : common) {
      if (std::find(steps.begin(), steps.end(), c) != steps.end()) {
        keep.push_back(c);
      }
    }
    common = std::move(keep);
  }
  plan.where = absl::StrJoin(held, "; ");
  if (common.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot recover: the pservers are on different timelines and hold no "
        "checkpoint step in common (",
        plan.where, "); restart the job from a common checkpoint"));
  }
  const int64_t target = *std::max_element(common.begin(), common.end());
  // The newest generation can serve as the target only if every pserver on
  // it already stands at the target step; otherwise a new one is needed,
  // since a pserver never goes back to a generation it has been on. (When
  // they all say the same but their versions disagree, which a pserver
  // never reusing a generation should rule out, start a new one too.)
  bool reuse = !same;
  for (const GetStatusResponse& r : statuses) {
    if (r.generation() == g && r.base_step() != target) reuse = false;
  }
  plan.action = RecoveryPlan::Action::kRollback;
  plan.step = target;
  plan.generation = reuse ? g : g + 1;
  return plan;
}

}  // namespace shardps
