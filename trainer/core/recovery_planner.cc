#include "trainer/core/recovery_planner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {

namespace {

// The checkpoint steps every pserver holds.
std::vector<int64_t> CommonCheckpoints(
    const std::vector<GetStatusResponse>& statuses) {
  std::vector<int64_t> common(statuses[0].checkpoint_steps().begin(),
                              statuses[0].checkpoint_steps().end());
  for (const GetStatusResponse& r : statuses) {
    const auto& steps = r.checkpoint_steps();
    std::vector<int64_t> keep;
    for (int64_t c : common) {
      if (std::find(steps.begin(), steps.end(), c) != steps.end()) {
        keep.push_back(c);
      }
    }
    common = std::move(keep);
  }
  return common;
}

// Where each pserver stands, for the messages: its timeline, versions and
// checkpoints.
std::string DescribeTimelines(const std::vector<GetStatusResponse>& statuses,
                              const std::vector<std::string>& addresses) {
  std::vector<std::string> held;
  for (size_t s = 0; s < statuses.size(); ++s) {
    const GetStatusResponse& r = statuses[s];
    held.push_back(absl::StrCat(
        s < addresses.size() ? addresses[s] : absl::StrCat("pserver ", s),
        " generation ", r.generation(), " from step ", r.base_step(),
        " at versions ", r.min_version(), "-", r.max_version(),
        ", checkpoints [", absl::StrJoin(r.checkpoint_steps(), ","), "]"));
  }
  return absl::StrJoin(held, "; ");
}

}  // namespace

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
  const std::vector<int64_t> common = CommonCheckpoints(statuses);
  plan.where = DescribeTimelines(statuses, addresses);
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

namespace {

// A trainer other than the chief, finding the pservers disagreeing: asks
// the chief to roll back (the pservers wake it) and waits 200 ms;
// DEADLINE_EXCEEDED once `ready_timeout` has passed since the first ask
// (*first_asked, InfinitePast before it).
absl::Status AskChiefToRollBack(JobClient* client, int trainer_id,
                                absl::Duration ready_timeout,
                                const RecoveryPlan& plan,
                                absl::Time* first_asked) {
  const absl::Time now = absl::Now();
  if (*first_asked == absl::InfinitePast()) {
    *first_asked = now;
    LOG(WARNING) << "trainer " << trainer_id << ": pservers disagree ("
                 << plan.where << "): asking the chief to roll every one back "
                 << "to step " << plan.step << ", and waiting for it";
  } else if (now - *first_asked > ready_timeout) {
    return absl::DeadlineExceededError(
        absl::StrCat("the pservers disagree (", plan.where,
                     ") and the chief (trainer 0) "
                     "has not rolled the job back in ",
                     absl::FormatDuration(ready_timeout),
                     " (--ready_timeout_s); is it running?"));
  }
  // Wakes the chief if it waits in a pull for this trainer's push; asked
  // again while it has not rolled back, since it may reach its next pull
  // after this one.
  absl::Status s = client->Rollback(plan.step, plan.generation);
  if (!s.ok()) {
    LOG_EVERY_T(WARNING, 10) << "asking the chief: " << s;
  }
  absl::SleepFor(absl::Milliseconds(200));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> JoinAgreedTimeline(JobClient* client,
                                           RequestStamp* stamp, int trainer_id,
                                           bool sync,
                                           absl::Duration ready_timeout) {
  absl::Time chief_asked = absl::InfinitePast();
  std::vector<std::string> addresses;
  for (PsClientInterface* s : client->servers())
    addresses.push_back(s->address());
  for (int attempt = 0; sync; ++attempt) {
    ASSIGN_OR_RETURN(std::vector<GetStatusResponse> st, client->Statuses());
    absl::StatusOr<RecoveryPlan> planned = PlanRecovery(st, addresses);
    // A running job moves while its pservers answer (a step can take a
    // millisecond): versions more than one step apart may be the skew of
    // the answers, not a pserver that lost its state. Read again before
    // acting on a disagreement (found joining a job with backup workers
    // that had run ahead: "different timelines" with versions 14 and 12).
    for (int again = 0;
         again < 10 &&
         (!planned.ok() || planned->action != RecoveryPlan::Action::kAdopt);
         ++again) {
      absl::SleepFor(absl::Milliseconds(20));
      ASSIGN_OR_RETURN(st, client->Statuses());
      planned = PlanRecovery(st, addresses);
    }
    ASSIGN_OR_RETURN(const RecoveryPlan plan, std::move(planned));
    if (plan.action == RecoveryPlan::Action::kAdopt) {
      stamp->set_generation(plan.generation);
      break;
    }
    if (trainer_id != 0) {
      RETURN_IF_ERROR(AskChiefToRollBack(client, trainer_id, ready_timeout,
                                         plan, &chief_asked));
      continue;
    }
    LOG(WARNING) << "trainer 0: pservers disagree (" << plan.where
                 << "): rolling every one back to step " << plan.step
                 << ", generation " << plan.generation;
    absl::Status r = client->Rollback(plan.step, plan.generation);
    if (r.ok()) continue;  // check again
    if (attempt >= 3) return r;
    LOG(WARNING) << "rollback failed, trying again: " << r;
  }
  return client->Join();
}

}  // namespace shardps
