#ifndef SHARDPS_COMPRESSION_PULL_DELTA_H_
#define SHARDPS_COMPRESSION_PULL_DELTA_H_

// Compressed pulls (docs/compression.md, "Compressed pulls"): with
// --compression=threshold a pull carries the threshold-encoded change of a
// dense block since the copy the trainer holds, with the residual kept on
// the pserver (error feedback on the way down, as on the way up).
//
// The pserver keeps, per dense block and shared by every trainer, a
// *shadow*: the values the trainers hold, which lag the master values by
// the residual r = values - shadow. A pull that finds the block at a newer
// version than the shadow encodes r (one threshold message, at most
// kPullDeltaMaxFraction of the block's elements, the threshold chosen to
// leave the least residual) and adds the message to the shadow, as the
// trainers will. The last messages are kept, so that a trainer a few
// versions behind (async) gets the chain of them; one that holds nothing,
// another epoch (a restarted pserver, a rollback) or a version no longer
// kept gets the whole shadow, dense.
//
// Memory on the pserver: one float32 copy of each dense block pulled this
// way, plus recent messages of at most as many bytes again. On the
// trainer: one float32 copy of each block (PullDeltaDecoder).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace shardps {

// The most elements one message sends, as a fraction of the block: a
// message is then at most 1/17 of the dense block's bytes (plus a 16-byte
// header), below a bitmap's 1/16. Most messages are far smaller; the bound
// matters in the first steps, when many values move at once (a bound of
// 1/64 there cost the canonical MLP 1.9 points of test accuracy after one
// pass; 1/17, 0.3 points, for the same bytes in all).
inline constexpr double kPullDeltaMaxFraction = 1.0 / 17;

// The threshold that leaves the least squared residual when every element
// with |d_i| >= t moves by t toward 0, among the magnitudes of the
// `max_entries` largest elements of `d`; 0 when `d` is all zero (or holds
// no finite non-zero value). `scratch` is working memory. Exposed for
// tests.
float ChooseDeltaThreshold(absl::Span<const float> d, int64_t max_entries,
                           std::vector<float>* scratch);

// One block's message: encodes `values - *shadow` at ChooseDeltaThreshold
// (at most max_entries entries, always the threshold format) into `*msg`
// (emptied first; empty: nothing to send) and adds it to `*shadow` exactly
// as DecodeAdd does on the trainer. `scratch` and `mags` are working
// memory.
absl::Status EncodePullDelta(absl::Span<const float> values,
                             absl::Span<float> shadow, int64_t max_entries,
                             std::vector<int32_t>* msg,
                             std::vector<float>* scratch,
                             std::vector<float>* mags);

// Adds every message of `chain` (threshold or bitmap messages laid end to
// end, as little-endian bytes; empty: none) to `target`, in order.
// INVALID_ARGUMENT naming the problem for a bad message; messages before it
// have been added.
absl::Status DecodeAddChain(absl::string_view chain, absl::Span<float> target);

// The pserver's half: the shadows of a job's blocks. Thread-safe.
class PullDeltaEncoder {
 public:
  // What a trainer gets for one block.
  struct Reply {
    bool dense = false;        // `*out` holds the shadow, float32
    uint64_t epoch = 0;        // the shadow's, for the trainer's next pull
    int64_t base_version = 0;  // a delta: the version it applies to
    int64_t version = 0;       // the version the trainer then holds
  };

  // Memory accounting: `reserve(bytes)` is asked before a block's shadow
  // and working memory are made (kBytesPerValue for each of its values;
  // false: that pull fails RESOURCE_EXHAUSTED), and `release` gets every
  // reserved byte back when the encoder goes. Both may be empty.
  struct Accounting {
    std::function<bool(int64_t)> reserve;
    std::function<void(int64_t)> release;
  };
  // Bytes reserved per value of a block: the shadow, the kept messages
  // (at most as many bytes), the difference and the threshold's
  // candidates.
  static constexpr int64_t kBytesPerValue = 4 * sizeof(float);

  explicit PullDeltaEncoder(Accounting accounting = {});
  ~PullDeltaEncoder();
  PullDeltaEncoder(const PullDeltaEncoder&) = delete;
  PullDeltaEncoder& operator=(const PullDeltaEncoder&) = delete;

  // The reply for a trainer that holds (`held_epoch`, `held_version`) of
  // block (`table_id`, `block`), whose master values are `values` at
  // `version` in store generation `generation`. A new generation, or a
  // version below the shadow's, starts the block's shadow afresh (a new
  // epoch: dense to everyone). Writes the message chain or the dense shadow
  // (float32 little-endian) to `*out`.
  absl::Status Serve(uint32_t table_id, uint32_t block, uint64_t generation,
                     int64_t version, absl::Span<const float> values,
                     uint64_t held_epoch, int64_t held_version,
                     std::string* out, Reply* reply);

  // Bytes held: shadows and kept messages.
  size_t MemoryBytes() const;

 private:
  struct Message {
    int64_t base_version;
    int64_t version;
    std::string bytes;
  };
  struct Block {
    absl::Mutex mu;
    uint64_t epoch ABSL_GUARDED_BY(mu) = 0;    // 0: no shadow yet
    int64_t reserved ABSL_GUARDED_BY(mu) = 0;  // bytes, from accounting_
    uint64_t generation ABSL_GUARDED_BY(mu) = 0;
    int64_t version ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> shadow ABSL_GUARDED_BY(mu);
    std::deque<Message> recent ABSL_GUARDED_BY(mu);  // oldest first
    size_t recent_bytes ABSL_GUARDED_BY(mu) = 0;
    std::vector<int32_t> msg ABSL_GUARDED_BY(mu);
    std::vector<float> scratch ABSL_GUARDED_BY(mu);
    std::vector<float> mags ABSL_GUARDED_BY(mu);
  };

  Block* Find(uint32_t table_id, uint32_t block);
  uint64_t NextEpoch();
  // Brings the shadow to `version` (a new message) or restarts it.
  absl::Status Advance(Block* b, uint64_t generation, int64_t version,
                       absl::Span<const float> values)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu);

  const Accounting accounting_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Block>> blocks_
      ABSL_GUARDED_BY(mu_);
  // Taken under a block's mutex, which mu_ is never taken under.
  std::atomic<uint64_t> next_epoch_;
};

// The trainer's half: its copy of each block it pulls compressed.
// Thread-safe; pulls of one block must not overlap (a reply names the
// version it applies to, and one that does not follow the held version is
// DATA_LOSS).
class PullDeltaDecoder {
 public:
  struct Held {
    uint64_t epoch = 0;  // 0: nothing held
    int64_t version = 0;
  };
  // One entry per block: its table, index and size.
  struct BlockSize {
    uint32_t table_id;
    uint32_t block;
    int64_t size;
  };
  explicit PullDeltaDecoder(absl::Span<const BlockSize> blocks);

  // What the trainer holds of a block (for its pull request).
  Held held(uint32_t table_id, uint32_t block) const;

  // Takes a reply block: `dense` float32 values of the shadow, or a chain
  // that applies to `base_version` of `epoch`; then copies the block into
  // `target` (its size). DATA_LOSS for a block not known, a size that does
  // not match, a chain for another epoch or version, or a bad message (the
  // block is then forgotten: the next pull is dense).
  absl::Status Take(uint32_t table_id, uint32_t block, bool dense,
                    uint64_t epoch, int64_t base_version, int64_t version,
                    absl::string_view bytes, absl::Span<float> target);

  // Forgets every block (the next pulls are dense).
  void Forget();

 private:
  struct Block {
    mutable absl::Mutex mu;
    Held held ABSL_GUARDED_BY(mu);
    std::vector<float> values ABSL_GUARDED_BY(mu);
  };
  const Block* Find(uint32_t table_id, uint32_t block) const;

  absl::flat_hash_map<uint64_t, std::unique_ptr<Block>> blocks_;  // fixed
};

}  // namespace shardps

#endif  // SHARDPS_COMPRESSION_PULL_DELTA_H_
