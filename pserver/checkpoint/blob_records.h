#ifndef SHARDPS_PSERVER_CHECKPOINT_BLOB_RECORDS_H_
#define SHARDPS_PSERVER_CHECKPOINT_BLOB_RECORDS_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// The records of a pserver's table blobs (docs/checkpoint_format.md, DSN1
// and SPT2), walked without loading them into a table: for tools that cut
// checkpoints up (resharding, export). Every walker checks the framing and
// returns DATA_LOSS naming `name` for a bad header, a truncated record or
// trailing bytes, and stops at the first error its callback returns.

// One dense block as DSN1 holds it. `raw` is the whole record (header,
// values, slots), `values` its `size` floats (unaligned).
struct DenseRecord {
  uint32_t index = 0;
  int64_t version = 0;
  int64_t size = 0;
  uint32_t slots = 0;
  absl::string_view raw;
  const char* values = nullptr;
};

// Walks a DSN1 blob of dense table `table`, checking each block's index and
// size against the table's shape and block size.
absl::Status ForEachDenseRecord(
    absl::string_view name, absl::string_view blob, const TableSpec& table,
    const std::function<absl::Status(const DenseRecord&)>& f);

// One sparse row as SPT2 holds it: `raw` is key, last step, update count
// and the row's floats (`row`, the value's `dim` then the optimizer's).
struct SparseRecord {
  uint64_t key = 0;
  absl::string_view raw;
  const char* row = nullptr;
};

// Walks an SPT2 blob: `header` with the blob's dim and floats per row
// (before any row), then `row` for each row and `sighting` with each
// admission sighting's 24 raw bytes (key, count, last step) and key.
absl::Status ForEachSparseRecord(
    absl::string_view name, absl::string_view blob,
    const std::function<absl::Status(int32_t dim, int32_t row_floats)>& header,
    const std::function<absl::Status(const SparseRecord&)>& row,
    const std::function<absl::Status(uint64_t key, absl::string_view raw)>&
        sighting);

// Values in dense table `t`.
int64_t NumValues(const TableSpec& t);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_BLOB_RECORDS_H_
