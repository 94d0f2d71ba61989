#ifndef SHARDPS_PSERVER_STORE_SPARSE_DISK_TIER_PLAN_H_
#define SHARDPS_PSERVER_STORE_SPARSE_DISK_TIER_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/disk/row_store.h"

namespace shardps {

// How the shard of a sparse table with a disk tier (SparseTableOptions.disk)
// splits its memory between RocksDB and the rows it caches.
struct DiskTierPlan {
  // The cache, RocksDB's memory included: cache_mb, at most the shard's
  // share of the budget.
  int64_t cache_bytes = 0;
  // What is left of it for rows and their index (SparseTable's
  // memory_share).
  int64_t row_share = 0;
  RowStore::Options store;
};

// The cache of a disk tier without cache_mb or a memory limit.
inline constexpr int64_t kDefaultDiskCacheBytes = int64_t{256} << 20;

// INVALID_ARGUMENT, naming the table and the option, unless `spec`'s
// options go with a disk tier: its cache evicts by LFU or LRU (TTL,
// L2_NORM and evict_after_steps would have to scan the disk), never
// refuses (rows go to disk), and cache_mb is in [0, 2^30].
absl::Status ValidateDiskTier(const TableSpec& spec);

// The plan of a shard of `spec` whose share of the budget is `share` (0:
// no limit; JobTables::SparseShare) and whose rows go to `dir`.
// RocksDB takes two memtables of cache/16 (1 to 64 MiB) and a block cache
// of cache/4 (1 MiB to 1 GiB), the filter of keys on disk cache/16 (64 KiB
// to 256 MiB). INVALID_ARGUMENT when under 512 KiB would be left for rows.
absl::StatusOr<DiskTierPlan> PlanDiskTier(const TableSpec& spec, int64_t share,
                                          std::string dir);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_SPARSE_DISK_TIER_PLAN_H_
