#ifndef SHARDPS_TRAINER_INPUT_PIPELINE_H_
#define SHARDPS_TRAINER_INPUT_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "proto/ps_service.pb.h"
#include "trainer/client/sparse_client.h"

namespace shardps {

// The data side of a training step and of an evaluation: it loads a batch,
// fetches what the batch needs from the pservers beyond the dense tables,
// hands the model its input, and sends back the gradients of that input.
// IDX records go to the model as they are; LIBSVM records go through a
// sparse input whose rows live in a sparse table on the pservers.
// Thread-compatible.
class InputPipeline {
 public:
  virtual ~InputPipeline() = default;

  // Reads this trainer's shard of the training data and the test set. With
  // sparse_input.adapt_optimizer_to_data, moves the optimizers of `*config`
  // to the training data's statistics (optimizer_adaptation.h) and logs it.
  static absl::StatusOr<std::unique_ptr<InputPipeline>> Create(
      ModelConfig* config, int trainer_id, int num_trainers, int batch_size);

  virtual int model_input_dim() const = 0;
  virtual int num_classes() const = 0;
  virtual int64_t local_records() const = 0;
  virtual int64_t test_records() const = 0;
  virtual const std::vector<int64_t>& records_per_trainer() const = 0;

  // The sparse table of the job, appended after the model's dense tables
  // (none for IDX data).
  virtual bool has_sparse_table() const { return false; }
  virtual TableSpec SparseTableSpec() const { return TableSpec(); }
  // Its index in the job's tables; set before the first step.
  void set_sparse_table_id(uint32_t id) { sparse_table_id_ = id; }

  virtual void StartPass(int pass, bool shuffle, uint64_t seed) = 0;
  // Loads training batch `index` of this pass (batch_size records), or, for
  // evaluation, test records [first, first + n).
  virtual void LoadTrainBatch(int64_t index, int batch_size) = 0;
  virtual void LoadTestBatch(int64_t first, int n) = 0;

  // Pulls the rows the loaded batch needs (nothing for IDX data).
  virtual absl::Status PullRows(SparseClient* client, int64_t min_version,
                                int64_t step, TransferStats* stats) {
    return absl::OkStatus();
  }
  // The model's input for the loaded batch (batch x model_input_dim), and
  // its labels.
  virtual const float* x() = 0;
  virtual const int32_t* labels() const = 0;
  // Where the model writes d loss / d x; null when nothing needs it.
  virtual float* input_grad() { return nullptr; }
  // Sends the gradients of the batch's rows (after input_grad was filled).
  virtual absl::Status PushRows(SparseClient* client, int64_t step, bool sync,
                                TransferStats* stats) {
    return absl::OkStatus();
  }

 protected:
  uint32_t sparse_table_id_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_INPUT_PIPELINE_H_
