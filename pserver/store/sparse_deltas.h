#ifndef SHARDPS_PSERVER_STORE_SPARSE_DELTAS_H_
#define SHARDPS_PSERVER_STORE_SPARSE_DELTAS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pserver/store/sparse_table.h"

namespace shardps {

// A sparse table's incremental checkpoints (docs/checkpoint_format.md,
// "Deltas"): the SPD1 blob holds, per stripe, only the keys changed since
// the table's previous save (SparseTable::TrackChanges): their rows as SPT2
// holds them, their admission sightings, and the keys whose row and
// sighting are both gone (evicted). Applied to the table as it was at that
// save, it gives the table as it was at this one.
class SparseDeltas {
 public:
  // Magic "SPD1", dim, floats per row, and the group (stripe) count.
  static std::string Header(const SparseTable& t);
  // Stripe `s`'s group: rows, sightings and removed keys of its changed
  // keys.
  static void AppendGroup(const SparseTable& t, const SparseTable::Stripe& s,
                          std::string* out) ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Checks an SPD1 blob for `t` (framing, dim, width, no key twice in a
  // list) without changing it: DATA_LOSS saying what is wrong.
  static absl::Status Verify(const SparseTable& t, absl::string_view blob);
  // Applies a blob Verify accepted: rows replace or create the key's row
  // (and drop its sighting), sightings replace the key's (and drop its
  // row), removed keys lose both. RESOURCE_EXHAUSTED when new rows do not
  // fit the budget.
  static absl::Status Apply(SparseTable* t, absl::string_view blob);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_SPARSE_DELTAS_H_
