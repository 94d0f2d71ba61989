#ifndef SHARDPS_PSERVER_STORE_SPARSE_SPARSE_SHARD_H_
#define SHARDPS_PSERVER_STORE_SPARSE_SPARSE_SHARD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "pserver/store/sparse/sparse_table.h"
#include "pserver/store/step/step_barrier.h"

namespace shardps {

// The rows of one sparse table held on this pserver as one barrier unit:
// a sync step of the table is complete when every trainer has sent all its
// chunks of it; then each key gets the mean over the trainers that pushed
// it. ASYNC pushes are applied on arrival. Expired rows (EvictionPolicy)
// are removed when the policy's pass is due; a primary's evictions travel
// with its updates, and a backup makes the same ones. `mu` guards the
// barrier and the expiry schedule; the rows lock their own stripes.
// Thread-safe.
class SparseShard final : public BarrierUnit {
 public:
  // `optimizer` and `membership` must outlive the shard.
  // `shard`: its index among the table's units (replication; named "sparse
  // table e shard 2" when `sharded`). `memory_share` and `store` (the disk
  // tier, or null): SparseTable's.
  SparseShard(uint32_t table_id, const TableSpec& spec,
              const Optimizer* optimizer, const Membership* membership,
              int quorum, MemoryBudget* budget = nullptr, uint32_t shard = 0,
              bool sharded = false, int64_t memory_share = 0,
              std::unique_ptr<RowStore> store = nullptr);

  // Whether `blob` (a checkpoint of this table, SparseTable::Serialize)
  // would load: DATA_LOSS otherwise. Changes nothing. (With a disk tier,
  // whose rows outnumber memory, it checks the framing only: a key twice
  // is not found.)
  absl::Status Verify(absl::string_view blob) const;

  SparseTable& rows() { return rows_; }
  const SparseTable& rows() const { return rows_; }
  // The table's own name ("e"); BarrierUnit::name() is "sparse table e".
  const std::string& table_name() const { return name_; }

  // Adds the chunk's rows into the step's per-key sums and counts.
  void Accumulate(const PushPayload& p, bool first) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Applies each key's mean over the trainers that pushed it, then evicts.
  std::optional<AppliedUpdate> ApplyStep(const PushPayload* last,
                                         std::vector<WaiterPtr>* ready) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Applies an ASYNC chunk's rows as they are; evicts every
  // evict_after_steps / 2 steps.
  std::optional<AppliedUpdate> ApplyNow(int64_t step,
                                        const PushPayload& p) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Copies the rows of the target's keys to target.out, as SparseTable::Read
  // (under the stripes' locks; a replicated table's also under `mu`, shared,
  // once it is settled).
  void Read(const PullTarget& target, const PullSink& sink) const override;
  // Streaming saves: every stripe of the rows (SparseTable::MarkForSave).
  void MarkForSave(SaveSink* sink, bool delta) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    rows_.MarkForSave(sink, table_id(), delta);
  }
  // A backup's table (BarrierUnit::ApplyReplicated): keys.size() rows of
  // gradient, one scale or one per key; the keys must be distinct. Evicts
  // as the primary did.
  absl::Status ApplyReplicated(const AppliedUpdate& update,
                               std::vector<WaiterPtr>* ready) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

 private:
  // Whether the expiry pass is due at `step` (EvictionPolicy::PassDue);
  // notes it as run when it is.
  bool ExpiryDue(int64_t step, bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A primary's pass: removes the expired rows (their keys into `expired`
  // unless null).
  void Expire(int64_t step, std::vector<uint64_t>* expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const std::string name_;
  const SparseTableOptions options_;
  const Optimizer* const optimizer_;
  SparseTable rows_;
  int64_t last_expiry_step_ ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_STORE_SPARSE_SPARSE_SHARD_H_
