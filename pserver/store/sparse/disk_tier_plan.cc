#include "pserver/store/sparse/disk_tier_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardps {

absl::Status ValidateDiskTier(const TableSpec& spec) {
  const SparseTableOptions& so = spec.sparse();
  if (!so.has_disk()) return absl::OkStatus();
  auto bad = [&spec](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: sparse table ", spec.name(), " with a disk tier: ", what,
        " (docs/sparse_memory.md, \"Disk tier\")"));
  };
  const EvictionOptions& e = so.eviction();
  if (e.policy() != EvictionOptions::LFU &&
      e.policy() != EvictionOptions::LRU) {
    return bad(absl::StrCat("its cache evicts by LFU or LRU, not ",
                            EvictionOptions::Policy_Name(e.policy()),
                            " (that would scan the disk)"));
  }
  if (e.ttl_steps() > 0 || e.ttl_seconds() > 0 || e.min_l2_norm() > 0 ||
      so.evict_after_steps() > 0) {
    return bad(
        "rows on disk do not expire: ttl_steps, ttl_seconds, min_l2_norm and "
        "evict_after_steps must be 0");
  }
  if (e.refuse_when_full()) {
    return bad("a full cache writes rows to disk; refuse_when_full is unset");
  }
  if (so.disk().cache_mb() < 0 || so.disk().cache_mb() > (int64_t{1} << 30)) {
    return bad(absl::StrCat("disk.cache_mb ", so.disk().cache_mb(),
                            " is not in [0, 2^30]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DiskTierPlan> PlanDiskTier(const TableSpec& spec, int64_t share,
                                          std::string dir) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  DiskTierPlan plan;
  const int64_t asked = spec.sparse().disk().cache_mb() * kMiB;
  plan.cache_bytes = asked > 0 ? asked : kDefaultDiskCacheBytes;
  if (share > 0 && (asked <= 0 || share < plan.cache_bytes)) {
    plan.cache_bytes = share;
  }
  plan.store.dir = std::move(dir);
  plan.store.write_buffer_bytes =
      std::clamp<int64_t>(plan.cache_bytes / 16, kMiB, 64 * kMiB);
  // Reads of the mapped files keep no blocks in RocksDB's cache (their
  // index and filter blocks stay with the files' readers): a small one.
  plan.store.block_cache_bytes =
      std::clamp<int64_t>(plan.cache_bytes / 64, 256 << 10, 16 * kMiB);
  plan.store.filter_bytes =
      std::clamp<int64_t>(plan.cache_bytes / 16, 64 << 10, 256 * kMiB);
  const int64_t rocksdb = RowStore::MemoryOf(plan.store);
  plan.row_share = plan.cache_bytes - rocksdb;
  if (plan.row_share < kMiB / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "InitJob: sparse table ", spec.name(), ": its disk tier's cache of ",
        plan.cache_bytes / double(kMiB), " MiB (",
        asked > 0 ? "disk.cache_mb" : "its share of --max_memory_mb",
        ") leaves under 512 KiB for rows once RocksDB and the filter of keys "
        "on disk have their ",
        rocksdb / double(kMiB), " MiB; give it at least 4 MiB"));
  }
  return plan;
}

}  // namespace shardps
