#ifndef SHARDPS_PSERVER_STORE_JOB_TABLES_H_
#define SHARDPS_PSERVER_STORE_JOB_TABLES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "optimizer/optimizer.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/dense_table.h"
#include "pserver/store/memory/memory_budget.h"
#include "pserver/store/sparse/sparse_shard.h"
#include "pserver/store/sparse/sparse_table.h"
#include "pserver/store/step/membership.h"

namespace shardps {

struct BlockId {
  uint32_t table_id = 0;
  uint32_t block = 0;
};

// Gradient or value for one block, as a view into the request.
struct BlockData {
  uint32_t table_id = 0;
  uint32_t block = 0;
  absl::Span<const float> values;
  // The block as StoreState::ResolveBlocks found it for the request's
  // handler; null: the store finds it.
  DenseTableBlock* unit = nullptr;
};

// One chunk of a trainer's gradients for a sparse table, as views into the
// request: keys.size() rows of the table's dim floats.
struct SparseGrads {
  uint32_t table_id = 0;
  absl::Span<const uint64_t> keys;
  absl::Span<const float> grads;
  // SYNC: how many chunks of this table the trainer sends this pserver for
  // the step (every chunk carries the same count; an empty chunk counts).
  int32_t num_chunks = 1;
  // Replication: the shard the keys belong to (-1: this pserver's one).
  int shard = -1;
};

// The rows of `keys` that a pull wants, written to `out` (keys.size() * dim
// floats, owned by the caller until the pull is done).
struct SparsePull {
  uint32_t table_id = 0;
  absl::Span<const uint64_t> keys;
  float* out = nullptr;
  int shard = -1;  // as SparseGrads::shard
  // The shard as StoreState::ResolveSparse found it for the request's
  // handler; null: the store finds it.
  SparseShard* unit = nullptr;
};

// One unit of a push and its payload.
struct PushPart {
  BarrierUnit* unit;
  PushPayload payload;
};

// The most trainers a job may have (the per-trainer state of every unit is
// sized by it).
inline constexpr int kMaxTrainers = 1 << 16;
// The most chunks a trainer may announce for one sparse table in one sync
// step (each carries up to kMaxChunkBytes).
inline constexpr int32_t kMaxChunksPerStep = 1 << 16;
// The largest |scale| of a sparse table's row initializer (embeddings start
// near 0.01; the bound only keeps out what can only be a mistake or an
// attack).
inline constexpr float kMaxInitializerScale = 1e4f;

// INVALID_ARGUMENT or FAILED_PRECONDITION, naming the field, unless the
// job-wide fields of `job` are sound: mode, trainer count (in [1,
// kMaxTrainers], equal to `expected_trainers` when that is positive),
// replicas_to_aggregate.
absl::Status ValidateJob(const JobSpec& job, int expected_trainers);

// Memory a dense value costs on the pserver with `optimizer` (value,
// gradient sum, optimizer state), and what each unit costs besides its
// values for a job of `num_trainers` trainers.
int64_t DenseBytesPerValue(const Optimizer& optimizer);
int64_t UnitOverheadBytes(int num_trainers);

// The tables of a job on this pserver, built from the chief's JobSpec and
// the dense blocks placed here: each dense block and each sparse table is a
// BarrierUnit. The set of tables and units is constant once built; the
// units are thread-safe themselves. Thread-safe.
// What a job's tables report (JobTables::Versions, SparseStats, Progress).
// The lowest and highest version of the units.
struct VersionRange {
  int64_t min = 0;
  int64_t max = 0;
};
// Rows, memory and admission/eviction counters of a sparse table.
struct SparseTableStats {
  std::string name;
  uint32_t shard = 0;  // a replicated job's shard (0 otherwise)
  SparseCounters counters;
  size_t memory_bytes = 0;
  SparseTableOptions::RowStorage storage = SparseTableOptions::FLOAT32;
};
// A table with units here, and the steps applied to it: the most of its
// units' versions (a sync step, or an async push).
struct TableProgress {
  std::string name;
  bool sparse = false;
  int64_t steps = 0;
  // Updates not applied for a non-finite result: dense blocks' steps or
  // pushes, sparse rows.
  int64_t non_finite_updates = 0;
};

class JobTables {
 public:
  // Validates every table of `job` (names, kinds, shapes, block sizes, row
  // dims, optimizers) and `blocks` (known table, in range, dense, listed
  // once), with INVALID_ARGUMENT naming the problem, and RESOURCE_EXHAUSTED
  // when what the blocks and units need (bytes()) does not fit in `budget`
  // (null: no limit); nothing is built then. The sparse tables take their
  // rows' memory from `budget` too. `membership` and `budget` must outlive
  // the tables. REQUIRES: ValidateJob(job) ok.
  // With replication (docs/replication.md), `sparse_shards` lists the
  // shards this pserver holds of each sparse table: one unit per shard,
  // its index the shard. Empty: one unit per sparse table, index 0.
  // Sparse tables with a disk tier keep their rows under
  // `sparse_store_dir` (a new directory each; FAILED_PRECONDITION when
  // empty, UNAVAILABLE when RocksDB cannot open there).
  static absl::StatusOr<std::unique_ptr<JobTables>> Create(
      const JobSpec& job, absl::Span<const BlockId> blocks,
      const Membership* membership, MemoryBudget* budget = nullptr,
      absl::Span<const int> sparse_shards = {},
      const std::string& sparse_store_dir = "");
  // Gives bytes() back to the budget.
  ~JobTables();

  // Memory held by the dense blocks (values, gradient sums, optimizer
  // state) and the units' per-trainer state; sparse rows not included.
  int64_t bytes() const { return bytes_; }

  size_t num_tables() const { return tables_.size(); }
  const TableSpec& spec(uint32_t table_id) const {
    return tables_[table_id].spec;
  }

  // The units of a dense push from trainer `trainer_id` for `step`, with
  // INVALID_ARGUMENT or NOT_FOUND naming the first bad block (unknown,
  // wrong length, a NaN or Inf value, or one beyond FLT_MAX / trainers,
  // whose sum over a step could overflow).
  absl::Status ResolveDensePush(absl::Span<const BlockData> grads,
                                int trainer_id, int64_t step,
                                std::vector<PushPart>* parts) const;
  // The same for sparse chunks: known sparse tables, keys and values of
  // matching lengths, finite values, distinct keys, and (`sync`) a chunk
  // count of at least 1.
  absl::Status ResolveSparsePush(absl::Span<const SparseGrads> rows,
                                 int trainer_id, int64_t step, bool sync,
                                 std::vector<PushPart>* parts) const;

  // NOT_FOUND for an unknown table or a block not held here.
  absl::StatusOr<DenseTableBlock*> FindBlock(uint32_t table_id,
                                             uint32_t block) const;
  // NOT_FOUND for an unknown table or (replication) a shard not held here;
  // INVALID_ARGUMENT for a dense one. `shard` is ignored without
  // replication (one unit per table); -1: the first shard held.
  absl::StatusOr<SparseShard*> FindSparse(uint32_t table_id,
                                          int shard = -1) const;
  // Whether sparse tables have a unit per shard (replication).
  bool sharded_sparse() const { return sharded_sparse_; }

  // Every dense block held here, in (table, block) order.
  const std::vector<DenseTableBlock*>& blocks() const { return blocks_; }
  // The sparse tables, in table order.
  const std::vector<SparseShard*>& sparse() const { return sparse_; }
  // Every unit, in lock order: the dense blocks, then the sparse tables.
  const std::vector<BarrierUnit*>& units() const { return units_; }
  // The blocks of dense table `table_id` held here, index to size.
  absl::flat_hash_map<uint32_t, int64_t> BlockSizes(uint32_t table_id) const;
  // REQUIRES: table_id < num_tables().
  const Optimizer& optimizer(uint32_t table_id) const {
    return *tables_[table_id].optimizer;
  }
  int num_slots(uint32_t table_id) const {
    return tables_[table_id].optimizer->num_slots();
  }

  // Reports, each unit read under its lock.
  VersionRange Versions() const;
  // Each sparse table, in table order.
  std::vector<SparseTableStats> SparseStats() const;
  // Each table with units here, in table order.
  std::vector<TableProgress> Progress() const;
  // Pulls the units' barriers hold, answered or not (tests).
  size_t HeldPulls() const;

  // Each sparse unit's memory share: the tightest limit of `budget` less
  // its headroom (an eighth) and the job's `dense_bytes`, split evenly over
  // the job's sparse tables (times their `shards` here); 0 without a limit.
  static int64_t SparseShare(const JobSpec& job, const MemoryBudget* budget,
                             int64_t dense_bytes, size_t shards);

 private:
  struct Table {
    TableSpec spec;
    int64_t num_values = 0;  // dense
    std::unique_ptr<Optimizer> optimizer;
    absl::flat_hash_map<uint32_t, std::unique_ptr<DenseTableBlock>> blocks;
    std::vector<std::unique_ptr<SparseShard>> sparse;  // by shard
  };
  JobTables() = default;
  // Checks and sizes table i of `job` into *t (no units yet).
  static absl::Status DescribeTable(const JobSpec& job, int i, Table* t);
  // Checks `blocks` against `tables` (known dense tables, in range, none
  // twice) and returns the bytes the job will hold here, each block's
  // values in *sizes; nothing is allocated.
  static absl::StatusOr<int64_t> SizeBlocks(const std::vector<Table>& tables,
                                            absl::Span<const BlockId> blocks,
                                            int num_trainers,
                                            std::vector<int64_t>* sizes);
  // Makes the units, in lock order: a block of sizes[i] values for each of
  // `blocks`, and (`sparse_shards`, as Create) the shards of each sparse
  // table. REQUIRES: the tables described and `blocks` checked (SizeBlocks).
  // `disk[t][k]`: the disk tier of sparse table t's k-th shard (in
  // `sparse_shards`' order) and its rows' share, or null.
  struct DiskTier {
    std::unique_ptr<RowStore> store;
    int64_t row_share = 0;
  };
  void BuildUnits(absl::Span<const BlockId> blocks,
                  const std::vector<int64_t>& sizes,
                  const Membership* membership, int quorum,
                  MemoryBudget* budget, absl::Span<const int> sparse_shards,
                  int64_t sparse_share,
                  std::vector<std::vector<DiskTier>> disk);
  // Opens the disk tier of every shard of each sparse table that has one.
  static absl::Status OpenDiskTiers(const std::vector<Table>& tables,
                                    size_t shards, int64_t sparse_share,
                                    const std::string& dir,
                                    std::vector<std::vector<DiskTier>>* disk);

  std::vector<Table> tables_;
  std::vector<DenseTableBlock*> blocks_;
  std::vector<SparseShard*> sparse_;
  bool sharded_sparse_ = false;
  std::vector<BarrierUnit*> units_;
  int64_t bytes_ = 0;
  MemoryBudget* budget_ = nullptr;
  // The largest gradient value accepted: FLT_MAX / trainers, so that a
  // step's sum stays finite.
  float max_gradient_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_JOB_TABLES_H_
