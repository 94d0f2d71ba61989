#ifndef SHARDPS_PSERVER_REPLICATION_REPLICATED_UNITS_H_
#define SHARDPS_PSERVER_REPLICATION_REPLICATED_UNITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pserver/store/store_state.h"

namespace shardps {

// The store's side of a replicated job (docs/replication.md): on a
// primary, its units' applied updates go to an UpdateForwarder (the job's
// ReplicaSet); on a backup, its primary's updates are applied in order, and
// a joining backup's units are installed whole. It wraps the units of a
// ParameterStore's state; a replicated job's ReplicationHandler makes it
// at InitJob. Thread-safe; holds nothing of its own.
class ReplicatedUnits {
 public:
  // `state` must outlive it.
  explicit ReplicatedUnits(StoreState* state) : state_(state) {}

  // Set once, after InitJob (`forwarder` must outlive the store): pushes
  // and pulls of units this pserver is not the primary of are refused
  // FAILED_PRECONDITION; every update applied here is forwarded to the
  // unit's backups, after the units' locks are released, before the push
  // is answered or a pull can see it (BarrierUnit::set_replicated); a
  // sync push for a step already applied is a duplicate (a trainer pushing
  // again after a failover).
  void SetForwarder(UpdateForwarder* forwarder);
  // A backup: applies its primary's updates in order; one this store holds
  // already (its version is below the unit's) is skipped. FAILED_PRECONDITION
  // for a gap, INVALID_ARGUMENT for an unknown unit or a wrong size;
  // the updates before it stay applied.
  absl::Status Apply(const std::vector<AppliedUpdate>& updates);
  // A backup, ASYNC: the pushes its primary applied move their trainers'
  // clocks as they did there (PushRef.step). SYNC: nothing.
  void AdvanceClocks(const std::vector<PushRef>& pushes);
  // A primary: the state of unit `unit` of table `table_id`: a dense
  // block as a one-block dense blob (table_snapshot.h), a sparse shard as
  // its version and rows (SparseTable::Serialize). Takes the unit's lock
  // without waiting for it to settle: it is asked for while the unit's
  // updates are being forwarded (a joining backup), and nothing else
  // applies to the unit until they are settled.
  absl::StatusOr<std::string> ImageHeld(uint32_t table_id, uint32_t unit) const;
  // A joining backup: loads such an image (values, optimizer state,
  // version) and takes the job's timeline `generation`. DATA_LOSS for a
  // malformed image, NOT_FOUND for a unit not held here.
  absl::Status Install(uint32_t table_id, uint32_t unit,
                       const std::string& image, uint64_t generation);

 private:
  StoreState* const state_;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_REPLICATED_UNITS_H_
