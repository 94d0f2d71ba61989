#ifndef SHARDPS_COMMON_PLACEMENT_SHARD_MAP_H_
#define SHARDPS_COMMON_PLACEMENT_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardps {

// Placement of parameters on pservers, as docs/wire_protocol.md states it.
// Pure functions: every trainer computes the same map from the same ordered
// pserver list.

// Pservers a job may have.
inline constexpr int kMaxPservers = 1024;

// The placement below, as checkpoints record it (ShardPlacement.scheme).
inline constexpr int kPlacementScheme = 1;

// The 64-bit finaliser of MurmurHash3: a bijection that spreads keys.
inline uint64_t Mix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb93e185a87ebULL;
  k ^= k >> 33;
  return k;
}

// A stable hash of a table name (FNV-1a, then Mix64), the same on every
// machine and in every build.
uint64_t TableHash(absl::string_view name);

// Number of blocks a dense table of `num_values` values is cut into.
inline int64_t NumBlocks(int64_t num_values, int64_t block_size) {
  return (num_values + block_size - 1) / block_size;
}

// Block b of table `name` lives on pserver (TableHash(name) + b) % P.
inline int DenseBlockServer(uint64_t table_hash, int64_t block,
                            int num_servers) {
  return static_cast<int>((table_hash + static_cast<uint64_t>(block)) %
                          static_cast<uint64_t>(num_servers));
}

// Key k of a sparse table lives on pserver Mix64(k) % P.
inline int SparseKeyServer(uint64_t key, int num_servers) {
  return static_cast<int>(Mix64(key) % static_cast<uint64_t>(num_servers));
}

// With replication R (docs/replication.md, "Placement"): what pserver s
// holds without replication (its shard) lives on pservers s, s+1, ...,
// s+R-1 (mod P). REQUIRES: 1 <= replication <= num_servers, 0 <= shard <
// num_servers.
std::vector<int> ReplicaServers(int shard, int replication, int num_servers);

// The primary of `shard` among the pservers `alive` (ascending): the first
// of its replica list that is alive; -1 when none is (the shard is lost).
int PrimaryServer(int shard, int replication, int num_servers,
                  const std::vector<int>& alive);

}  // namespace shardps

#endif  // SHARDPS_COMMON_PLACEMENT_SHARD_MAP_H_
