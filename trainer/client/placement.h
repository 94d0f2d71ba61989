#ifndef SHARDPS_TRAINER_CLIENT_PLACEMENT_H_
#define SHARDPS_TRAINER_CLIENT_PLACEMENT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace shardps {

// One dense table as the trainer holds it: a flat float buffer.
struct DenseTableLayout {
  std::string name;
  int64_t num_values = 0;
  int64_t block_size = 0;
};

// Where one block lives and which part of its table it covers.
struct BlockPlacement {
  uint32_t table_id = 0;
  uint32_t block = 0;
  int64_t offset = 0;  // first value within the table
  int64_t size = 0;
};

// The blocks of the dense tables per pserver, cut into calls: plan[s][c]
// lists the blocks of call c to pserver s.
using ChunkPlan = std::vector<std::vector<std::vector<BlockPlacement>>>;

// Places the blocks of `tables` by the shard map (common/placement/shard_map.h)
// and cuts them into chunks of at most `max_chunk_bytes` of values (a single
// larger block gets a call of its own). Pure function.
ChunkPlan PlanChunks(const std::vector<DenseTableLayout>& tables,
                     int num_servers, size_t max_chunk_bytes);

// `blocks` (one pserver's, in order) cut into chunks of at most
// `max_chunk_bytes` of values, as PlanChunks cuts them.
std::vector<std::vector<BlockPlacement>> CutChunks(
    const std::vector<BlockPlacement>& blocks, size_t max_chunk_bytes);

// Positions into `keys` per pserver (Mix64(key) % P), cut into chunks of at
// most `max_chunk_bytes` of keys and `dim`-float rows. With `every_server`,
// each pserver gets at least one chunk, possibly empty (a sync push tells
// every pserver how many chunks of the step to expect). Pure function.
std::vector<std::vector<std::vector<uint32_t>>> SplitKeys(
    absl::Span<const uint64_t> keys, int dim, int num_servers,
    size_t max_chunk_bytes, bool every_server);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_PLACEMENT_H_
