#include "common/shard_map.h"

namespace shardps {

uint64_t TableHash(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;  // FNV prime
  }
  return Mix64(h);
}

}  // namespace shardps
