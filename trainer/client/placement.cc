#include "trainer/client/placement.h"

#include <algorithm>

#include "common/placement/shard_map.h"

namespace shardps {

ChunkPlan PlanChunks(const std::vector<DenseTableLayout>& tables,
                     int num_servers, size_t max_chunk_bytes) {
  std::vector<std::vector<BlockPlacement>> per_server(num_servers);
  for (size_t t = 0; t < tables.size(); ++t) {
    const DenseTableLayout& layout = tables[t];
    const uint64_t hash = TableHash(layout.name);
    const int64_t nb = NumBlocks(layout.num_values, layout.block_size);
    for (int64_t b = 0; b < nb; ++b) {
      BlockPlacement p;
      p.table_id = static_cast<uint32_t>(t);
      p.block = static_cast<uint32_t>(b);
      p.offset = b * layout.block_size;
      p.size = std::min(layout.block_size, layout.num_values - p.offset);
      per_server[DenseBlockServer(hash, b, num_servers)].push_back(p);
    }
  }
  ChunkPlan chunks(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    chunks[s] = CutChunks(per_server[s], max_chunk_bytes);
  }
  return chunks;
}

std::vector<std::vector<BlockPlacement>> CutChunks(
    const std::vector<BlockPlacement>& blocks, size_t max_chunk_bytes) {
  std::vector<std::vector<BlockPlacement>> chunks;
  size_t bytes = 0;
  for (const BlockPlacement& p : blocks) {
    const size_t b = static_cast<size_t>(p.size) * sizeof(float);
    if (chunks.empty() || bytes + b > max_chunk_bytes) {
      chunks.emplace_back();
      bytes = 0;
    }
    chunks.back().push_back(p);
    bytes += b;
  }
  return chunks;
}

std::vector<std::vector<std::vector<uint32_t>>> SplitKeys(
    absl::Span<const uint64_t> keys, int dim, int num_servers,
    size_t max_chunk_bytes, bool every_server) {
  std::vector<std::vector<uint32_t>> per_server(num_servers);
  for (size_t i = 0; i < keys.size(); ++i) {
    per_server[SparseKeyServer(keys[i], num_servers)].push_back(
        static_cast<uint32_t>(i));
  }
  const size_t per_key = sizeof(uint64_t) + sizeof(float) * dim;
  const size_t max_keys = std::max<size_t>(1, max_chunk_bytes / per_key);
  std::vector<std::vector<std::vector<uint32_t>>> chunks(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    const auto& idx = per_server[s];
    for (size_t start = 0; start < idx.size(); start += max_keys) {
      chunks[s].emplace_back(
          idx.begin() + start,
          idx.begin() + std::min(idx.size(), start + max_keys));
    }
    if (every_server && chunks[s].empty()) chunks[s].emplace_back();
  }
  return chunks;
}

}  // namespace shardps
