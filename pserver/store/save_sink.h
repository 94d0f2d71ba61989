#ifndef SHARDPS_PSERVER_STORE_SAVE_SINK_H_
#define SHARDPS_PSERVER_STORE_SAVE_SINK_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace shardps {

// Where a streaming save writes the units it has not written yet
// (docs/checkpoint_format.md, "Streaming saves"). A save marks every unit
// (a dense block, a sparse table's stripe) pending at its instant; whoever
// changes a pending unit first (a push, or the save's own thread walking
// the units) writes the unit's record here, as it was at that instant,
// with the unit's lock held, and clears the mark. So the save is
// point-in-time while pushes go on, and holds at most a unit's record per
// thread in memory. Thread-safe.
class SaveSink {
 public:
  virtual ~SaveSink() = default;
  // Appends `record` (whole: records of one blob never interleave) to the
  // blob of table `table_id`. A failure is kept by the sink and ends the
  // save; the caller goes on.
  virtual void Append(uint32_t table_id, absl::string_view record) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_SAVE_SINK_H_
