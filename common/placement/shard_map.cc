#include "common/placement/shard_map.h"

#include <algorithm>

namespace shardps {

uint64_t TableHash(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return Mix64(h);
}

std::vector<int> ReplicaServers(int shard, int replication, int num_servers) {
  std::vector<int> servers;
  for (int i = 0; i < replication; ++i) {
    servers.push_back((shard + i) % num_servers);
  }
  return servers;
}

int PrimaryServer(int shard, int replication, int num_servers,
                  const std::vector<int>& alive) {
  for (int s : ReplicaServers(shard, replication, num_servers)) {
    if (std::binary_search(alive.begin(), alive.end(), s)) return s;
  }
  return -1;
}

}  // namespace shardps
