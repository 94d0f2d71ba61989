#ifndef SHARDPS_PSERVER_STORE_TABLE_SNAPSHOT_H_
#define SHARDPS_PSERVER_STORE_TABLE_SNAPSHOT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/job_tables.h"

namespace shardps {

// What one pserver holds, for a checkpoint (docs/checkpoint_format.md):
// `info` (the job, the step, the timeline, the async clocks, who left) and
// one blob per table, named TableFileName(table id): a dense table's blocks
// in the DSN1 format below, a sparse table's rows in SparseTable's SPT2
// format (SparseTable::Serialize).
struct StoreSnapshot {
  CheckpointInfo info;
  std::vector<std::pair<std::string, std::string>> files;  // name, bytes
};

// "table-<id>.bin".
std::string TableFileName(size_t table_id);

// The blob of a dense table's blocks held here, little-endian: magic
// "DSN1", the block count, then per block its index, version, size, slot
// count, the values and each optimizer slot. Requires external
// synchronization.
class DenseBlobWriter {
 public:
  explicit DenseBlobWriter(uint32_t num_blocks);
  void Add(uint32_t index, int64_t version, absl::Span<const float> value,
           const std::vector<std::vector<float>>& slots);
  std::string Finish() && { return std::move(blob_); }

 private:
  std::string blob_;
};

// A DSN1 blob's header for `num_blocks` records, and one record: what
// DenseBlobWriter writes, for a blob written a record at a time (a
// streaming save, SaveSink).
std::string DenseBlobHeader(uint32_t num_blocks);
void AppendDenseRecord(std::string* out, uint32_t index, int64_t version,
                       absl::Span<const float> value,
                       const std::vector<std::vector<float>>& slots);

// One block as a dense blob holds it.
struct DenseBlockImage {
  uint32_t index = 0;
  int64_t version = 0;
  std::vector<float> value;
  std::vector<std::vector<float>> slots;
};

// Parses the dense blob `name` of a table whose blocks held here have the
// sizes `block_sizes` (index to values) and `num_slots` optimizer slots
// each. DATA_LOSS, naming the file, for a bad header, a truncated block, a
// block that is not the job's or appears twice, and trailing bytes.
absl::StatusOr<std::vector<DenseBlockImage>> ParseDenseBlob(
    absl::string_view name, absl::string_view blob,
    const absl::flat_hash_map<uint32_t, int64_t>& block_sizes, int num_slots);

// The snapshot of a job's tables. REQUIRES: nothing writes the units
// meanwhile (ParameterStore holds its gate exclusively).
// FAILED_PRECONDITION unless every unit is at version `step` (a sync step
// boundary), naming the first that is not.
absl::Status CheckStepBoundary(const JobTables& tables, int64_t step);
// The blob of table `table_id`: DSN1 for a dense table, SPT2 for a sparse
// one; an error when a disk tier's rows cannot be read whole.
absl::StatusOr<std::string> EncodeTable(const JobTables& tables,
                                        uint32_t table_id);

// A snapshot checked against the tables it is to be loaded into.
struct ParsedSnapshot {
  std::vector<std::vector<DenseBlockImage>> dense;  // per table
  std::vector<const std::string*> sparse;  // per table: into the snapshot
  size_t dense_blocks = 0;
};
// Parses and checks every blob of `snap` for `tables` before anything is
// loaded: DATA_LOSS for an unknown or repeated file, a missing table, a
// malformed blob, or other dense blocks than the job places here. The
// result points into `snap`, which must outlive it.
absl::StatusOr<ParsedSnapshot> ParseSnapshot(const StoreSnapshot& snap,
                                             const JobTables& tables);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_TABLE_SNAPSHOT_H_
