// Test helpers for the pserver's parts, shared by its tests: job specs,
// a pull that collects what it receives, and float and key bytes as the wire
// carries them. Header-only; tests only.
#ifndef SHARDPS_PSERVER_TESTING_STORE_TESTING_H_
#define SHARDPS_PSERVER_TESTING_STORE_TESTING_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "proto/ps_service.pb.h"
#include "pserver/store/parameter_store.h"

namespace shardps {
namespace testing {

inline OptimizerConfig Sgd(float lr) {
  OptimizerConfig o;
  o.set_type(OptimizerConfig::SGD);
  o.set_learning_rate(lr);
  return o;
}

inline OptimizerConfig Momentum(float lr, float momentum) {
  OptimizerConfig o = Sgd(lr);
  o.set_type(OptimizerConfig::MOMENTUM);
  o.set_momentum(momentum);
  return o;
}

inline OptimizerConfig Adam(float lr) {
  OptimizerConfig o = Sgd(lr);
  o.set_type(OptimizerConfig::ADAM);
  return o;
}

// A dense table of `size` values in blocks of `block_size`.
inline TableSpec DenseTableSpec(const std::string& name, int64_t size,
                                int64_t block_size,
                                const OptimizerConfig& optimizer) {
  TableSpec t;
  t.set_name(name);
  t.add_shape(size);
  t.set_block_size(block_size);
  *t.mutable_optimizer() = optimizer;
  return t;
}

// A sparse table of rows of `dim` floats (rows start at 0).
inline TableSpec SparseTableSpec(const std::string& name, int dim,
                                 const OptimizerConfig& optimizer) {
  TableSpec t;
  t.set_name(name);
  t.set_kind(TableSpec::SPARSE);
  t.mutable_sparse()->set_dim(dim);
  *t.mutable_optimizer() = optimizer;
  return t;
}

struct JobOptions {
  int max_staleness = -1;
  int replicas_to_aggregate = 0;
  int64_t global_batch_size = 8;
};

inline JobSpec MakeJobSpec(TrainingMode mode, int trainers,
                           std::vector<TableSpec> tables,
                           const JobOptions& o = JobOptions()) {
  JobSpec job;
  job.set_mode(mode);
  job.set_num_trainers(trainers);
  job.set_max_staleness(o.max_staleness);
  job.set_replicas_to_aggregate(o.replicas_to_aggregate);
  job.set_global_batch_size(o.global_batch_size);
  for (TableSpec& t : tables) *job.add_tables() = std::move(t);
  return job;
}

// What a pull of a store received.
struct PullResult {
  absl::Notification done;
  absl::Status status;
  std::vector<std::vector<float>> values;  // dense blocks, in order
  std::vector<float> rows;                 // sparse rows, if any
};

struct PullArgs {
  int trainer = 0;
  int64_t min_version = 0;
  int64_t step = 0;
  int64_t min_clock = 0;
  uint64_t generation = kAnyGeneration;
  // Sparse rows of table `sparse_table` for `keys` (dim floats each).
  uint32_t sparse_table = 0;
  std::vector<uint64_t> keys;
  int dim = 0;
};

// ParameterStore::Pull of dense blocks named by id, as a handler makes it:
// resolved first (StoreState::ResolveBlocks); a block not held, or a store
// not ready, answers `done` at once, a bad trainer first, as the handler's
// CheckPull does.
inline void PullByIds(ParameterStore* store, int trainer_id,
                      int64_t min_version, int64_t step, int64_t min_clock,
                      absl::Span<const BlockId> ids,
                      absl::Span<const SparsePull> sparse, PullSink sink,
                      PullDone done, uint64_t generation = kAnyGeneration) {
  absl::StatusOr<std::vector<DenseTableBlock*>> units =
      store->state()->ResolveBlocks(ids);
  if (!units.ok()) {
    absl::Status st = store->state()->CheckReadyAndTrainer(trainer_id);
    done(st.ok() ? units.status() : st, absl::ZeroDuration());
    return;
  }
  store->Pull(trainer_id, min_version, step, min_clock, *units, sparse,
              std::move(sink), std::move(done), generation);
}

// Starts a pull of `blocks` (and, with keys, sparse rows); the result fills
// when the store answers.
inline std::unique_ptr<PullResult> StartPull(ParameterStore* store,
                                             const PullArgs& a,
                                             std::vector<BlockId> blocks) {
  auto r = std::make_unique<PullResult>();
  PullResult* p = r.get();
  p->rows.assign(a.keys.size() * a.dim, -99.0f);
  // The keys must outlive the pull: the done callback holds them.
  auto keys = std::make_shared<std::vector<uint64_t>>(a.keys);
  std::vector<SparsePull> sparse;
  if (!keys->empty()) sparse.push_back({a.sparse_table, *keys, p->rows.data()});
  PullByIds(
      store, a.trainer, a.min_version, a.step, a.min_clock, blocks, sparse,
      [p](uint32_t, uint32_t, int64_t, absl::Span<const float> v) {
        p->values.emplace_back(v.begin(), v.end());
      },
      [p, keys](absl::Status s, absl::Duration) {
        p->status = std::move(s);
        p->done.Notify();
      },
      a.generation);
  return r;
}

inline std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

inline std::vector<float> BytesToFloats(const std::string& s) {
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

inline std::string KeyBytes(const std::vector<uint64_t>& k) {
  return std::string(reinterpret_cast<const char*>(k.data()),
                     k.size() * sizeof(uint64_t));
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_PSERVER_TESTING_STORE_TESTING_H_
