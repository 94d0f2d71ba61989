#ifndef SHARDPS_PSERVER_CHECKPOINT_ROW_EXPORT_H_
#define SHARDPS_PSERVER_CHECKPOINT_ROW_EXPORT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/parameter_store.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {

// The rows of a sparse table a page at a time, for `trainer --save_dir`
// (docs/saved_model.md, the ExportRows call of docs/wire_protocol.md).
class SparseRowExport {
 public:
  static constexpr uint64_t kEnd = ~uint64_t{0};
  // Appends up to `max_rows` rows of `table` (each key, and its value's
  // dim floats without optimizer state) from position `from` (0: the
  // first; a stripe and a slot in it), under each stripe's lock in turn;
  // then, with a disk tier, the rows on disk a RowStore bucket at a time
  // (a position past the stripes: a bucket and the rows of it already
  // read). Returns the position of the next row, or kEnd after the last;
  // the disk's read error.
  static absl::StatusOr<uint64_t> Page(const SparseTable& table, uint64_t from,
                                       size_t max_rows,
                                       std::vector<uint64_t>* keys,
                                       std::vector<float>* values);

 private:
  // Page's rows on disk, from row `skip` of bucket `bucket`.
  static absl::StatusOr<uint64_t> DiskPage(const SparseTable& table,
                                           size_t bucket, uint32_t skip,
                                           size_t max_rows,
                                           std::vector<uint64_t>* keys,
                                           std::vector<float>* values);
};

// The most rows, and the most bytes of values, in one page.
inline constexpr uint32_t kMaxExportRows = 65536;
inline constexpr size_t kMaxExportBytes = size_t{4} << 20;

// Answers ExportRows on `store`, whose job is ready: a page of sparse
// table `req.table_id()`'s rows held here, over each shard held
// (replication) in turn. INVALID_ARGUMENT for max_rows outside [1,
// kMaxExportRows], a dense table or a cursor past the shards held;
// NOT_FOUND for an unknown table; FAILED_PRECONDITION while a shard is
// below `req.min_version()`.
absl::Status ExportRowsPage(ParameterStore* store, const ExportRowsRequest& req,
                            ExportRowsResponse* resp);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_ROW_EXPORT_H_
