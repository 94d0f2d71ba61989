#ifndef SHARDPS_PSERVER_STORE_STEP_UPDATE_FORWARDER_H_
#define SHARDPS_PSERVER_STORE_STEP_UPDATE_FORWARDER_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "pserver/store/step/step_barrier.h"

namespace shardps {

// A push that updates answer: its trainer, request id and step (a backup
// records the id, so that the push sent again after a failover is a
// duplicate, and in async mode the trainer's clock).
struct PushRef {
  int trainer_id = 0;
  uint64_t request_id = 0;
  int64_t step = 0;
};

// What a ParameterStore of a replicated job (docs/replication.md) asks of
// its replication: whether this pserver serves a unit's pushes and pulls
// now, and the sending of its applied updates to the unit's backups.
// Implemented by ReplicaSet (pserver/replication/replica_set.h); tests use
// fakes.
class UpdateForwarder {
 public:
  virtual ~UpdateForwarder() = default;

  // OK when this pserver is the primary of the unit's shard in its view;
  // FAILED_PRECONDITION naming the view and the primary otherwise.
  virtual absl::Status CheckServes(uint32_t table_id, uint32_t unit) const = 0;

  // Sends `updates` (applied here, in this order; their units are in
  // flight, so that nothing else applies to them or reads them until the
  // caller settles them after this returns) to every backup of their units
  // in the view, and returns once each holds them. A backup that does not
  // answer is taken out of the view first. FAILED_PRECONDITION when this
  // pserver is no longer the primary of a unit (a newer view: it must not
  // answer the push or let a pull see the update); UNAVAILABLE when no view
  // could be agreed.
  virtual absl::Status Forward(const std::vector<AppliedUpdate>& updates,
                               const std::vector<PushRef>& pushes) = 0;
};

// The updates that a push's apply steps returned (BarrierUnit::
// set_replicated), in the order applied, and the units they are in flight
// on: forwarded once the units' locks are released (StoreState::Forward),
// and settled when this is destroyed, after the forward or when an
// exception unwinds the push. Destroy it without holding the units' locks.
class AppliedUpdates {
 public:
  AppliedUpdates() = default;
  ~AppliedUpdates() {
    for (BarrierUnit* u : units_) u->Settle();
  }
  AppliedUpdates(const AppliedUpdates&) = delete;
  AppliedUpdates& operator=(const AppliedUpdates&) = delete;

  // Adds what `unit`'s apply step returned (nothing when it returned none).
  void Add(BarrierUnit* unit, std::optional<AppliedUpdate> update) {
    if (!update.has_value()) return;
    updates_.push_back(std::move(*update));
    units_.push_back(unit);
  }
  const std::vector<AppliedUpdate>& updates() const { return updates_; }

 private:
  std::vector<AppliedUpdate> updates_;
  std::vector<BarrierUnit*> units_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_STEP_UPDATE_FORWARDER_H_
