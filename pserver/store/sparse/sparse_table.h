#ifndef SHARDPS_PSERVER_STORE_SPARSE_SPARSE_TABLE_H_
#define SHARDPS_PSERVER_STORE_SPARSE_SPARSE_TABLE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/clock.h"
#include "optimizer/optimizer.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/disk/row_store.h"
#include "pserver/store/memory/memory_budget.h"
#include "pserver/store/rows/eviction_policy.h"
#include "pserver/store/rows/row_codec.h"
#include "pserver/store/rows/row_slab.h"
#include "pserver/store/rows/sighting_table.h"
#include "pserver/store/step/step_barrier.h"

namespace shardps {

// Counters of a sparse table, cumulative except `rows` and `pending_keys`.
struct SparseCounters {
  int64_t rows = 0;             // rows held now
  int64_t max_rows = 0;         // the memory share in rows; 0: no limit
  int64_t pending_keys = 0;     // keys seen, not yet admitted
  int64_t created = 0;          // rows created
  int64_t evicted = 0;          // rows removed by eviction, both kinds:
  int64_t evicted_full = 0;     //   to make room for new rows
  int64_t expired = 0;          //   past a TTL or below the norm
  int64_t dropped_updates = 0;  // gradients of keys not yet admitted
  int64_t refused_rows = 0;     // new rows that found no room, dropped
  // Row updates not applied: they would have made the row non-finite.
  int64_t non_finite_updates = 0;
  // The disk tier (SparseTableOptions.disk): `rows` are those in memory.
  bool on_disk = false;
  int64_t disk_rows = 0;     // rows on disk now
  int64_t spilled_rows = 0;  // rows written to disk to make room
  int64_t loaded_rows = 0;   // rows read back into memory to be updated
  // Reads and writes of the disk that failed (their updates dropped, or
  // pulls answered with initial values).
  int64_t disk_errors = 0;
};

// The rows of one sparse table that one pserver holds: uint64 key to `dim`
// floats plus the optimizer's per-row state, held as float32, bf16 or fp16
// (storage_type; RowCodec). A row is created on first update from an
// initializer seeded by (table seed, key) only, so its initial value does
// not depend on which pserver or trainer touched it first. Memory grows
// with the keys updated, never with the key space: rows (a 20-byte head of
// key, last step and update count, then the floats) live in chunks of up
// to kMaxRowsPerChunk, indexed by a RowIndex.
// Keys are split over stripes by Mix64(key), each with its own mutex; no lock
// covers the whole table. With a memory share, each stripe holds at most
// its part of it in rows: a new row then takes the place of the rows the
// EvictionPolicy scores lowest (docs/sparse_memory.md). With a RowStore
// (the disk tier), the stripes are a cache: rows that leave it are written
// to disk, not dropped (SparseTableDisk). Thread-safe.
class SparseDeltas;

class SparseTable {
 public:
  static constexpr int kDefaultStripes = 64;
  // Rows are allocated in chunks of at most this many rows and (unless one
  // row is larger) this many bytes.
  static constexpr int kMaxRowsPerChunk = 256;
  static constexpr int64_t kChunkBytes = 256 << 10;
  static constexpr int64_t kMinRowsPerStripe = 64;

  // REQUIRES: options.dim() > 0. `optimizer` must outlive the table, and
  // `budget` (may be null: no limit) and `clock` (null: the real one) too.
  // `memory_share`: the bytes of rows and admission counters the table may
  // hold (0: no limit but the budget's). A row chunk is allocated only when
  // `budget` has room for it; a row that finds none takes the place of
  // the lowest-scored row of its stripe, or is refused (its gradients
  // dropped and counted as refused_rows, with a warning).
  // With `store` (the disk tier), `memory_share` bounds the rows cached in
  // memory (and the store's own memory, which is counted in the budget);
  // the store must be empty.
  SparseTable(const SparseTableOptions& options, const Optimizer* optimizer,
              int num_stripes = kDefaultStripes, MemoryBudget* budget = nullptr,
              int64_t memory_share = 0, const Clock* clock = nullptr,
              std::unique_ptr<RowStore> store = nullptr);
  // Gives back to the budget what the table holds.
  ~SparseTable();

  SparseTable(const SparseTable&) = delete;
  SparseTable& operator=(const SparseTable&) = delete;

  int dim() const { return dim_; }
  SparseTableOptions::RowStorage storage() const { return codec_.type(); }
  bool on_disk() const { return store_ != nullptr; }

  // Copies the rows of `keys` to `out` (keys.size() * dim floats). A key
  // without a row reads as its initial value; reading creates nothing.
  void Read(absl::Span<const uint64_t> keys, float* out) const;

  // Applies one update per key: grads holds keys.size() rows of dim floats,
  // and key i's gradient is multiplied by scales[i] (the 1/count of a sync
  // mean; a span of size 1 applies to every key). `step` selects the
  // learning rate and marks the rows updated. A key not yet admitted (see
  // SparseTableOptions.admit_after) counts a sighting and its gradient is
  // dropped and counted; at the sighting that admits it, its row is created
  // and updated. New rows past the memory share evict the lowest-scored
  // rows not updated at `step` (their keys appended to `evicted_full`,
  // unless null) unless `evict_when_full` is false (a backup, which evicts
  // what its primary did).
  // REQUIRES: grads.size() == keys.size() * dim.
  void Apply(int64_t step, absl::Span<const uint64_t> keys,
             absl::Span<const float> grads, absl::Span<const float> scales,
             std::vector<uint64_t>* evicted_full = nullptr,
             bool evict_when_full = true);

  // SYNC: adds one trainer's gradients for the step being assembled (keys
  // distinct within a call; each trainer pushes a key at most once a step).
  // REQUIRES: grads.size() == keys.size() * dim.
  void Accumulate(absl::Span<const uint64_t> keys,
                  absl::Span<const float> grads);
  // SYNC: applies, per key, the mean of the step's gradients (over the
  // trainers that pushed the key, or with gradient_mean STEP_TRAINERS over
  // `step_trainers`), and clears the accumulators. Returns the keys updated.
  // With `applied`, also appends each key, its summed gradient and its scale
  // there, and the rows evicted to make room (evicted_full), so that
  // DropRows(evicted_full) and Apply(step, keys, grad, scales) elsewhere do
  // the same.
  // `step_trainers`: the trainers whose pushes made up the step, the divisor
  // of every key's sum with gradient_mean STEP_TRAINERS (else each key's
  // sum is divided by the pushes it had).
  int64_t ApplyAccumulated(int64_t step, int step_trainers,
                           AppliedUpdate* applied = nullptr);

  // Removes the rows the policy finds expired at `step` (keys appended to
  // `expired` unless null) and forgets sightings older than its step TTL.
  // Returns the rows removed.
  int64_t Expire(int64_t step, std::vector<uint64_t>* expired = nullptr);
  // Forgets the sightings older than the step TTL at `step`.
  void ForgetSightings(int64_t step);
  // Removes the rows of `keys` (those it holds): a backup's copy of its
  // primary's evictions, counted as `full` ones or expired.
  void DropRows(absl::Span<const uint64_t> keys, bool full);
  const EvictionPolicy& policy() const { return policy_; }

  // The initial value of `key`'s row (dim floats).
  void InitialRow(uint64_t key, float* out) const;

  // Checkpoints: appends every row (key, value, optimizer state, last
  // update step and count) and pending admission sightings to `out`, in a
  // little-endian format of this class. The SYNC accumulators are not
  // saved: a checkpoint is taken at a step boundary, where they are empty.
  // With a disk tier, an error (DATA_LOSS, UNAVAILABLE) when the rows on
  // disk cannot be read whole: `out` is then short of them, not to be kept.
  absl::Status Serialize(std::string* out) const;
  // Replaces every row and sighting with those of `data` (from Serialize of
  // a table with the same dim and optimizer) and clears the accumulators.
  // DataLoss when `data` is malformed or its dim or state width differs,
  // RESOURCE_EXHAUSTED when its rows do not fit in the budget; the table is
  // then left empty. With `keep`, only the rows and sightings of the keys
  // it accepts (one shard's, of a blob holding several).
  using KeyFilter = std::function<bool(uint64_t key)>;
  absl::Status Deserialize(absl::string_view data,
                           const KeyFilter& keep = nullptr);

  // Streaming saves (SaveSink): the header of the blob Serialize writes,
  // whose groups are then the stripes' records, one each, in any order;
  // `copies` tables of this shape write into one blob (a replicated job's
  // shards of a table on one pserver).
  std::string SaveHeader(int copies = 1) const;
  // Marks every stripe as not yet written by the save to `sink` (as table
  // `table_id`): the next change of a stripe writes it first. With
  // `delta`, a stripe writes only the keys changed since the last save
  // (SparseDeltas; REQUIRES: TrackChanges(true) since that save).
  void MarkForSave(SaveSink* sink, uint32_t table_id, bool delta = false);

  // Incremental checkpoints: remember which keys each change touches (a
  // row updated, created or evicted, a sighting counted or forgotten),
  // until the next save writes them. Off by default (it costs a hash
  // insert per change).
  void TrackChanges(bool on) { track_changes_ = on; }
  // Writes every stripe still marked.
  void SaveRemaining();

  SparseCounters counters() const;
  // Bytes held for rows, their state and the indexes.
  size_t MemoryBytes() const;

 private:
  // What a checkpoint keeps of a row besides its floats.
  struct RowMeta {
    uint64_t key = 0;
    int64_t last_step = 0;
    int64_t updates = 0;  // Adam's t - 1
  };
  // What one Apply or ApplyAccumulated call shares with its rows.
  struct ApplyContext {
    int64_t step = 0;
    int64_t now_seconds = 0;
    bool evict_when_full = true;
    std::vector<uint64_t>* evicted_full = nullptr;
    std::vector<absl::Span<float>> slots;  // the optimizer's, of one row
    std::vector<float> row;  // a decoded row (storage other than float32)
  };
  // A key of a stripe's batch without a row (yet): SparseNewRows's input.
  struct NewKey {
    uint64_t key;
    const float* grad;
    float scale;
  };
  // What SparseNewRows does with a NewKey.
  enum Fate : uint8_t {
    kDropped = 0,  // not admitted yet (or refused, or the disk failed)
    kCreate = 1,   // a new row
    kAgain = 2,    // updates the row an earlier entry of its key made
    kLoad = 3,     // its row is on disk: read back, then updated
  };
  struct Stripe {
    Stripe(int row_floats, RowCodec codec, int rows_per_chunk)
        : rows(row_floats, codec, rows_per_chunk) {}
    mutable absl::Mutex mu;
    RowSlab rows ABSL_GUARDED_BY(mu);
    // Per slot, when the policy uses the clock: the wall clock of the
    // row's last update (or creation, or restore), seconds since
    // kClockEpoch. Not saved.
    std::vector<uint32_t> seconds ABSL_GUARDED_BY(mu);
    SightingTable sightings ABSL_GUARDED_BY(mu);
    // SYNC accumulators: key to its position in accum_sums (dim floats) and
    // accum_counts (trainers that pushed it).
    absl::flat_hash_map<uint64_t, uint32_t> accum_index ABSL_GUARDED_BY(mu);
    std::vector<uint64_t> accum_keys ABSL_GUARDED_BY(mu);
    std::vector<float> accum_sums ABSL_GUARDED_BY(mu);
    std::vector<int32_t> accum_counts ABSL_GUARDED_BY(mu);
    int64_t created ABSL_GUARDED_BY(mu) = 0;
    int64_t evicted_full ABSL_GUARDED_BY(mu) = 0;
    int64_t expired ABSL_GUARDED_BY(mu) = 0;
    int64_t dropped ABSL_GUARDED_BY(mu) = 0;
    int64_t refused ABSL_GUARDED_BY(mu) = 0;
    int64_t non_finite ABSL_GUARDED_BY(mu) = 0;
    int64_t spilled ABSL_GUARDED_BY(mu) = 0;
    int64_t loaded ABSL_GUARDED_BY(mu) = 0;
    int64_t disk_errors ABSL_GUARDED_BY(mu) = 0;
    // The disk tier: keys a pull looked for on disk, with no row of the
    // stripe spilled since, to the bytes of their rows found there (empty:
    // found nowhere), so that the next push does not read them again
    // (SparseTableDisk). A spill, a restore or a drop takes its keys out;
    // the push's lookup empties it. looked_bytes: the rows' bytes.
    absl::flat_hash_map<uint64_t, std::string> looked ABSL_GUARDED_BY(mu);
    int64_t looked_bytes ABSL_GUARDED_BY(mu) = 0;
    // Bytes of rows, index and accumulators counted in the budget.
    int64_t reserved ABSL_GUARDED_BY(mu) = 0;
    // A streaming save that has not written this stripe yet.
    SaveSink* pending_save ABSL_GUARDED_BY(mu) = nullptr;
    uint32_t pending_table ABSL_GUARDED_BY(mu) = 0;
    bool pending_delta ABSL_GUARDED_BY(mu) = false;
    // The disk tier: the store as it was at the pending save's instant.
    std::shared_ptr<const RowStore::Snapshot> pending_snapshot
        ABSL_GUARDED_BY(mu);
    // With TrackChanges: the keys changed since the last save.
    absl::flat_hash_set<uint64_t> changed ABSL_GUARDED_BY(mu);
  };
  static constexpr uint32_t kNoRow = RowSlab::kNone;
  static constexpr size_t kLookupBatch = RowSlab::kLookupBatch;
  friend class SparseDeltas;         // reads and writes stripes for deltas
  friend class SparseTableBlob;      // reads and writes stripes for saves
  friend class SparseTableEviction;  // admits, evicts and expires rows
  friend class SparseRowExport;      // reads rows a page at a time
  friend class SparseTableDisk;      // moves rows between memory and disk
  friend class SparseNewRows;        // admits, makes and loads new rows
  // Notes a change of `key` in `s` for the next delta.
  void Changed(Stripe& s, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    if (track_changes_) s.changed.insert(key);
  }

  Stripe& StripeOf(uint64_t key) const;
  size_t StripeIndex(uint64_t key) const;
  // Empties `s`, giving its memory back to the budget.
  void ClearStripe(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Empties every stripe, each under its lock.
  void ClearStripes();
  // The sync accumulators of `s`, emptied.
  void ClearAccumulators(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  RowMeta MetaOf(const Stripe& s, uint32_t slot) const
      ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Sets the head of the row in `slot` (updates saturated).
  void SetMeta(Stripe& s, uint32_t slot, const RowMeta& meta) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Reserves in the budget what the stripe's next row allocates (a chunk,
  // the index's growth); false when it has no room.
  bool ReserveRow(Stripe& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // A new row for `key`, or kNoRow when the budget has no room for the
  // chunk or index growth it needs.
  uint32_t NewRow(Stripe& s, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Frees the row of `key` in `slot` (index entry, slot, change note).
  void RemoveRow(Stripe& s, uint64_t key, uint32_t slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Applies one update to the row in `slot`.
  void UpdateRow(Stripe& s, uint32_t slot, const float* grad, float scale,
                 ApplyContext* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  ApplyContext MakeContext(int64_t step) const;
  // The wall clock, in seconds since kClockEpoch (2020-01-01 UTC).
  static constexpr int64_t kClockEpoch = 1577836800;
  int64_t NowSeconds() const;
  // What the policy scores the row in `slot` by.
  RowUse UseOf(const Stripe& s, uint32_t slot) const
      ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Notes the wall clock of the row in `slot`, if the policy uses it.
  void Stamp(Stripe& s, uint32_t slot, int64_t now_seconds) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The positions of `keys` grouped by stripe, in the keys' order within a
  // stripe: stripe i's are order[begin[i]] to order[begin[i + 1] - 1].
  void GroupByStripe(absl::Span<const uint64_t> keys,
                     std::vector<uint32_t>* order,
                     std::vector<uint32_t>* begin) const;

  const int dim_;
  const int row_floats_;  // dim + the optimizer's state (StateFloats)
  const RowCodec codec_;
  const int row_bytes_;  // a row's bytes in its chunk, head included
  // The stripes asked for, fewer when the share holds few rows (at least
  // kMinRowsPerStripe a stripe).
  const int num_stripes_;
  // Admission counters per stripe; 0 when admit_after <= 1.
  const int64_t sightings_per_stripe_;
  // Rows a stripe may hold (the memory share's part); 0: no limit.
  const int64_t max_rows_per_stripe_;
  const int rows_per_chunk_;
  MemoryBudget* const budget_;
  const SparseTableOptions options_;  // eviction LFU by default on disk
  const Optimizer* const optimizer_;
  const EvictionPolicy policy_;
  const Clock* const clock_;
  // A deque: a Stripe (its mutex) never moves.
  mutable std::deque<Stripe> stripes_;
  std::atomic<bool> track_changes_{false};
  // The disk tier, or null. Its memory is held in the budget.
  std::unique_ptr<RowStore> store_;
  // Guards what a save or a restore of the disk tier keeps between calls.
  mutable absl::Mutex disk_mu_;
  // A whole save's store part, written by SaveRemaining.
  SaveSink* store_save_ ABSL_GUARDED_BY(disk_mu_) = nullptr;
  uint32_t store_save_table_ ABSL_GUARDED_BY(disk_mu_) = 0;
  std::shared_ptr<const RowStore::Snapshot> store_save_snapshot_
      ABSL_GUARDED_BY(disk_mu_);
  // Rows a restore writes to disk, a batch at a time.
  std::unique_ptr<RowStore::Batch> restoring_ ABSL_GUARDED_BY(disk_mu_);
  // Pulls of rows on disk that failed to read (Read is const).
  mutable std::atomic<int64_t> read_errors_{0};
};

// A sparse table's checkpoint blobs (SPT2, docs/checkpoint_format.md):
// what SparseTable's Serialize, Deserialize and streaming saves do.
class SparseTableBlob {
 public:
  static std::string Header(const SparseTable& t, int copies);
  static absl::Status Serialize(const SparseTable& t, std::string* out);
  static absl::Status Load(SparseTable& t, absl::string_view data,
                           const SparseTable::KeyFilter& keep);
  static void MarkForSave(SparseTable& t, SaveSink* sink, uint32_t table_id,
                          bool delta);
  static void SaveRemaining(SparseTable& t);
  // Appends the stripe's group (rows, then sightings) as Serialize does.
  static void AppendGroup(const SparseTable& t, const SparseTable::Stripe& s,
                          std::string* out) ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Writes the stripe's group to the save that marked it, if any: called
  // before every change.
  static void SaveIfPending(const SparseTable& t, SparseTable::Stripe& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Walks an SPT2 blob for `t` (header, dim, framing) without loading it:
  // DATA_LOSS saying what is wrong. A key twice is not looked for.
  static absl::Status Check(const SparseTable& t, absl::string_view data);
  // Load: row `key` of a checkpoint, with `meta`, into its stripe
  // (restored, not counted as created). DATA_LOSS for a key already there,
  // RESOURCE_EXHAUSTED past the budget; the stripe's lock is released on
  // return, so that the caller can clear the table.
  static absl::Status RestoreRow(SparseTable& t, uint64_t key,
                                 SparseTable::RowMeta meta,
                                 absl::Span<const float> row);
  // Load and SparseDeltas::Apply: sets the sighting of `key`.
  static void RestoreSighting(SparseTable& t, uint64_t key, Sighting seen);
};

// What keeps a sparse table within its memory share: SparseTable's
// admission, eviction and expiry (docs/sparse_memory.md).
class SparseTableEviction {
 public:
  // Counts a sighting of `key`; whether it is admitted now.
  static bool Admit(SparseTable& t, SparseTable::Stripe& s, uint64_t key,
                    int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Removes the `count` lowest-scored rows of `s` not updated at c->step
  // (their keys into c->evicted_full); returns how many went.
  static int64_t EvictLowest(SparseTable& t, SparseTable::Stripe& s,
                             int64_t count, SparseTable::ApplyContext* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  static int64_t Expire(SparseTable& t, int64_t step,
                        std::vector<uint64_t>* expired);
  static void ForgetSightings(SparseTable& t, int64_t step);
  static void DropRows(SparseTable& t, absl::Span<const uint64_t> keys,
                       bool full);
};

// A stripe's keys without a row in memory, of one Apply or ApplyAccumulated
// (its lock held): in key order (so that admission and eviction do not
// depend on the order of the pushes), counts their sightings (or, with a
// disk tier, finds their rows on disk), makes room for the admitted ones,
// creates them (or reads them back), and applies their updates. A key may
// appear more than once (a push's keys may repeat).
class SparseNewRows {
 public:
  static void Add(SparseTable& t, SparseTable::Stripe& s,
                  std::vector<SparseTable::NewKey>* fresh,
                  SparseTable::ApplyContext* c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

 private:
  // Each entry's fate; the rows to make or read back, or -1 when the disk
  // cannot be read (then none may be made).
  static int64_t Decide(SparseTable& t, SparseTable::Stripe& s,
                        absl::Span<const SparseTable::NewKey> fresh,
                        SparseTable::ApplyContext* c,
                        std::vector<uint8_t>* fate,
                        std::vector<std::string>* stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Makes (or reads back) the rows of the kCreate and kLoad entries into
  // (*slot)[i], evicting for room where `evicts`; kNoRow when refused.
  static void Place(SparseTable& t, SparseTable::Stripe& s,
                    absl::Span<const SparseTable::NewKey> fresh,
                    absl::Span<const uint8_t> fate,
                    absl::Span<const std::string> stored, bool evicts,
                    SparseTable::ApplyContext* c, std::vector<uint32_t>* slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
};

// A sparse table's disk tier (SparseTableOptions.disk; docs/sparse_memory.md,
// "Disk tier"): the stripes cache the rows of a RowStore. A key's row is
// in one of the two at most: a row read back into memory is deleted from
// disk, and a row leaves memory only once it is written to disk, both
// under its stripe's lock. On disk a row is its bytes in the stripe (a
// RowHead, then its floats in the table's storage). A whole checkpoint
// holds the stripes' groups, then one group per RowStore bucket, read
// from a snapshot taken with every stripe locked.
class SparseTableDisk {
 public:
  // Groups a whole blob of `t` holds besides its stripes'.
  static int ExtraGroups(const SparseTable& t) {
    return t.store_ != nullptr ? RowStore::kBuckets : 0;
  }
  // Read: the rows of keys[p], for each p in `misses` (keys not in memory),
  // into `out` (initial values for those not on disk, and for all when the
  // disk cannot be read: counted and logged).
  // `spills[i]`: stripe i's spill count when its misses were found; the
  // keys and what the disk held for them are noted (Stripe::looked) in
  // stripes that have spilled nothing since.
  static void ReadMisses(const SparseTable& t, absl::Span<const uint64_t> keys,
                         absl::Span<const uint32_t> misses, float* out,
                         absl::Span<const int64_t> spills);
  // Notes keys[i] with rows[i] (empty: not on disk) in their stripes'
  // `looked`, where spills[j] is still stripe j's spill count.
  static void NoteLooked(const SparseTable& t, absl::Span<const uint64_t> keys,
                         std::vector<std::string>* rows,
                         absl::Span<const int64_t> spills);
  // Takes `key` out of its stripe's `looked`.
  static void Unlook(SparseTable::Stripe& s, uint64_t key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The most keys a stripe notes, and the most bytes of rows: a sixteenth
  // of its rows' (the room eviction leaves), at least kMinLookedBytes.
  static constexpr size_t kMaxLooked = 8192;
  static constexpr int64_t kMinLookedBytes = 16 << 10;
  static int64_t MaxLookedBytes(const SparseTable& t);
  // SparseNewRows: fate[i] = kLoad, with the row's bytes in rows[i], for the
  // first entry of each key of `fresh` (sorted by key) whose row is on
  // disk. False when the disk cannot be read (counted, logged): then no
  // key of `fresh` may make a row.
  static bool Find(SparseTable& t, SparseTable::Stripe& s,
                   absl::Span<const SparseTable::NewKey> fresh,
                   std::vector<uint8_t>* fate, std::vector<std::string>* rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Whether `bytes`, read from disk for `key`, are a whole row of that key;
  // when not, a disk error (counted, logged): the key's updates are
  // dropped, and no fresh row may take the place of what the disk holds.
  static bool Usable(const SparseTable& t, SparseTable::Stripe& s, uint64_t key,
                     const std::string& bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // A slot holding the Usable row `bytes` read from disk for `key`, or
  // kNoRow when the budget has no room.
  static uint32_t Load(SparseTable& t, SparseTable::Stripe& s, uint64_t key,
                       const std::string& bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Deletes from disk the rows just loaded into `s` (slots[i] holds
  // keys[i]). When that fails, takes them out of memory again (their disk
  // copies stand), sets their slots to kNoRow and returns false.
  static bool Forget(SparseTable& t, SparseTable::Stripe& s,
                     absl::Span<const uint64_t> keys,
                     absl::Span<uint32_t> slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // EvictLowest: writes the rows in `slots` to disk, then frees them.
  // False, freeing nothing, when the write fails (counted, logged).
  static bool Spill(SparseTable& t, SparseTable::Stripe& s,
                    absl::Span<const uint32_t> slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);

  // Saves. MarkForSave takes the snapshot with every stripe locked and
  // marks them; a whole save's disk groups are written by SaveRemaining,
  // and a delta's changed keys on disk are read from the snapshot.
  static void MarkForSave(SparseTable& t, SaveSink* sink, uint32_t table_id,
                          bool delta);
  static void SaveRemaining(SparseTable& t);
  // Serialize: the stripes' groups, then the disk's.
  static absl::Status Serialize(const SparseTable& t, std::string* out);
  // SparseDeltas::AppendGroup: appends the rows of those `keys` (changed,
  // neither in memory nor counted as sightings) on disk in `snapshot` to
  // `rows`, and the others to `removed`.
  // An error when the disk cannot be read.
  static absl::Status AppendChanged(const SparseTable& t,
                                    const RowStore::Snapshot* snapshot,
                                    absl::Span<const uint64_t> keys,
                                    std::string* rows, uint64_t* num_rows,
                                    std::string* removed,
                                    uint64_t* num_removed);

  // Restores write rows straight to disk (and drop any copy in memory),
  // a batch at a time; FinishRestore writes the last batch.
  static absl::Status RestoreRow(SparseTable& t, uint64_t key,
                                 const SparseTable::RowMeta& meta,
                                 absl::Span<const float> row);
  static absl::Status DropRow(SparseTable& t, uint64_t key);
  static absl::Status FinishRestore(SparseTable& t);
  // Empties the disk (ClearStripes).
  static void Clear(SparseTable& t);

 private:
  static absl::Status Flush(SparseTable& t, bool all)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(t.disk_mu_);
  // The disk's groups of a whole save, from `snapshot`, each passed to
  // `emit`.
  // Stops at, and returns, a read error.
  static absl::Status ForEachGroup(
      const SparseTable& t, const RowStore::Snapshot& snapshot,
      const std::function<void(const std::string&)>& emit);
};

inline int64_t SparseTable::Expire(int64_t step,
                                   std::vector<uint64_t>* expired) {
  return SparseTableEviction::Expire(*this, step, expired);
}
inline void SparseTable::ForgetSightings(int64_t step) {
  SparseTableEviction::ForgetSightings(*this, step);
}
inline void SparseTable::DropRows(absl::Span<const uint64_t> keys, bool full) {
  SparseTableEviction::DropRows(*this, keys, full);
}

inline absl::Status SparseTable::Serialize(std::string* out) const {
  return SparseTableBlob::Serialize(*this, out);
}
inline absl::Status SparseTable::Deserialize(absl::string_view data,
                                             const KeyFilter& keep) {
  return SparseTableBlob::Load(*this, data, keep);
}
inline std::string SparseTable::SaveHeader(int copies) const {
  return SparseTableBlob::Header(*this, copies);
}
inline void SparseTable::MarkForSave(SaveSink* sink, uint32_t table_id,
                                     bool delta) {
  SparseTableBlob::MarkForSave(*this, sink, table_id, delta);
}
inline void SparseTable::SaveRemaining() {
  SparseTableBlob::SaveRemaining(*this);
}

// A sparse table's incremental checkpoints (docs/checkpoint_format.md,
// "Deltas"): the SPD1 blob holds, per stripe, only the keys changed since
// the table's previous save (SparseTable::TrackChanges): their rows as SPT2
// holds them, their admission sightings, and the keys whose row and
// sighting are both gone (evicted). Applied to the table as it was at that
// save, it gives the table as it was at this one.
class SparseDeltas {
 public:
  // Magic "SPD1", dim, floats per row, and the group (stripe) count, of
  // `copies` tables like `t` (SparseTable::SaveHeader).
  static std::string Header(const SparseTable& t, int copies = 1);
  // Stripe `s`'s group: rows, sightings and removed keys of its changed
  // keys.
  // An error when the disk tier cannot be read.
  static absl::Status AppendGroup(const SparseTable& t,
                                  const SparseTable::Stripe& s,
                                  std::string* out)
      ABSL_SHARED_LOCKS_REQUIRED(s.mu);
  // Checks an SPD1 blob for `t` (framing, dim, width, no key twice in a
  // list) without changing it: DATA_LOSS saying what is wrong.
  static absl::Status Verify(const SparseTable& t, absl::string_view blob);
  // Applies a blob Verify accepted: rows replace or create the key's row
  // (and drop its sighting), sightings replace the key's (and drop its
  // row), removed keys lose both. RESOURCE_EXHAUSTED when new rows do not
  // fit the budget.
  // With `keep`, only the keys it accepts (SparseTable::Deserialize).
  static absl::Status Apply(SparseTable* t, absl::string_view blob,
                            const SparseTable::KeyFilter& keep = nullptr);

 private:
  // Frees `key`'s row in `s`, if it has one (and on disk).
  static absl::Status DropRow(SparseTable& t, SparseTable::Stripe& s,
                              uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_SPARSE_SPARSE_TABLE_H_
