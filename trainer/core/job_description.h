#ifndef SHARDPS_TRAINER_CORE_JOB_DESCRIPTION_H_
#define SHARDPS_TRAINER_CORE_JOB_DESCRIPTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/threshold_push_encoder.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/param_client.h"
#include "trainer/core/options.h"
#include "trainer/core/update_sharing.h"

namespace shardps {

// The job spec of `o` over dense tables with these names, shapes and
// optimizers (docs/design.md, "Job start"): blocks of the config's
// block_size (65,536 values by default).
JobSpec MakeJobSpec(const TrainerOptions& o,
                    const std::vector<std::string>& names,
                    const std::vector<std::vector<int64_t>>& shapes,
                    const std::vector<OptimizerConfig>& optimizers);

// What a complete description makes (JobDescription::Build).
struct DescribedJob {
  // The dense tables, then the sparse ones.
  JobSpec job;
  std::vector<DenseTableLayout> layouts;  // the dense tables'
  // --compression=threshold: the thresholds, and the optimizers that turn
  // gradients into the updates pushed (null otherwise).
  ThresholdPushEncoder::Options threshold;
  std::unique_ptr<UpdateSharing> sharing;
};

// The tables of a job as its trainer describes them before the job starts
// (TrainingSession::AddDenseTable, AddSparseTable), each checked as it
// comes; then the job they make. Thread-compatible; `options` must outlive
// it.
class JobDescription {
 public:
  explicit JobDescription(const TrainerOptions* options) : o_(*options) {}

  // A dense float32 table; its index among the dense tables.
  // INVALID_ARGUMENT for an empty or repeated name, a non-positive
  // dimension, or an optimizer the job cannot run (LARS outside plain
  // SYNC; docs/tuning.md).
  absl::StatusOr<int> AddDense(const std::string& name,
                               const std::vector<int64_t>& shape,
                               const OptimizerConfig& optimizer);
  // A sparse table; its index among the sparse tables. INVALID_ARGUMENT
  // for a dim outside [1, 65536], LARS, or a bad name.
  absl::StatusOr<int> AddSparse(const std::string& name,
                                const SparseTableOptions& sparse,
                                const OptimizerConfig& optimizer);
  // The job of the tables added; INVALID_ARGUMENT for a config block size
  // outside [1, kMaxBlockSize], or a job without a table.
  absl::StatusOr<DescribedJob> Build() const;

  bool empty() const { return names_.empty() && sparse_.empty(); }
  const std::vector<std::string>& dense_names() const { return names_; }
  const std::vector<std::vector<int64_t>>& dense_shapes() const {
    return shapes_;
  }
  const std::vector<TableSpec>& sparse_specs() const { return sparse_; }
  // Per dense table, whether its optimizer is LARS; empty when none is.
  const std::vector<bool>& lars() const { return lars_; }

 private:
  absl::Status CheckName(const std::string& name) const;
  // INVALID_ARGUMENT naming the flag when LARS cannot run in this job.
  absl::Status CheckLars(const std::string& name) const;

  const TrainerOptions& o_;
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<OptimizerConfig> optimizers_;
  std::vector<bool> lars_;
  std::vector<TableSpec> sparse_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_JOB_DESCRIPTION_H_
