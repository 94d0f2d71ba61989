#ifndef SHARDPS_COMMON_LAUNCH_MALLOC_TUNING_H_
#define SHARDPS_COMMON_LAUNCH_MALLOC_TUNING_H_

#include <malloc.h>

namespace shardps {

// Every push and pull allocates message buffers of up to 4 MiB and frees
// them at once. glibc serves such sizes with mmap and trims the heap after
// each free, so every step faults the same memory in again: measured, 356k
// page faults and 2.5 times slower 4 MiB pushes (benchmarks/
// push_pull_benchmark.cc). Keeping those buffers in the heap avoids it.
// Call once at the start of main().
inline void TuneMallocForLargeMessages() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_LAUNCH_MALLOC_TUNING_H_
