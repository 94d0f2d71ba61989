#ifndef SHARDPS_TRAINER_CORE_RECOVERY_PLANNER_H_
#define SHARDPS_TRAINER_CORE_RECOVERY_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/job_client.h"
#include "trainer/transport/request_stamp.h"

namespace shardps {

// What a trainer does to bring the pservers onto one timeline
// (docs/fault_tolerance.md).
struct RecoveryPlan {
  enum class Action {
    kAdopt,     // they agree: take `generation` and join
    kRollback,  // roll every pserver back to `step` as `generation`
  };
  Action action = Action::kAdopt;
  uint64_t generation = 0;
  int64_t step = 0;  // kRollback
  // Where each pserver stands, for the log ("host:port generation G from
  // step S at versions A-B, checkpoints [...]; ...").
  std::string where;
};

// The plan for SYNC pservers whose statuses are `statuses` (in --pservers
// order, named by `addresses`). They agree when all are on one generation
// from one base step with versions at most one step apart; otherwise every
// one goes back to the newest checkpoint step they all hold, on a
// generation none has been on (the newest one is reused only when every
// pserver on it already stands at that step: a rollback another trainer
// has begun, or a restarted pserver). FAILED_PRECONDITION when they hold no
// checkpoint step in common. Pure function.
absl::StatusOr<RecoveryPlan> PlanRecovery(
    const std::vector<GetStatusResponse>& statuses,
    const std::vector<std::string>& addresses);

// Brings the pservers of a SYNC job onto one timeline and joins it; returns
// the step to start at. Reads every pserver's status (again while they may
// only be skewed by a running step) and plans (PlanRecovery): when they
// disagree, the chief (trainer_id 0) rolls every one back, and another
// trainer asks it to (the pservers wake it) every 200 ms, until they agree
// or DEADLINE_EXCEEDED once `ready_timeout` has passed since the first ask.
// Adopts the agreed generation in `stamp`. ASYNC (`sync` false): joins.
absl::StatusOr<int64_t> JoinAgreedTimeline(JobClient* client,
                                           RequestStamp* stamp, int trainer_id,
                                           bool sync,
                                           absl::Duration ready_timeout);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_RECOVERY_PLANNER_H_
