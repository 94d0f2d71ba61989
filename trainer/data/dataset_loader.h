#ifndef SHARDPS_TRAINER_DATA_DATASET_LOADER_H_
#define SHARDPS_TRAINER_DATA_DATASET_LOADER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/model_config.pb.h"
#include "trainer/data/data_shard.h"
#include "trainer/data/idx_reader.h"
#include "trainer/data/libsvm_reader.h"
#include "trainer/data/sparse_dataset.h"

namespace shardps {

// A trainer's training shard and what it must know of the others'.
struct TrainData {
  std::unique_ptr<ShardedDataset> shard;
  // Records each trainer holds, so that every trainer of a synchronous job
  // computes the same number of steps per pass.
  std::vector<int64_t> records_per_trainer;
};

// Reads the training data of `config` for trainer `trainer_id` of
// `num_trainers`. One file (images and labels) is sharded by record; a list
// of files `name-00000,name-00001,...` by file suffix (file i to trainer
// i mod N), the images and labels lists paired by suffix.
absl::StatusOr<TrainData> LoadTrainData(const DataConfig& config,
                                        int trainer_id, int num_trainers);

// Reads the whole test set (every trainer evaluates on all of it).
absl::StatusOr<IdxData> LoadTestData(const DataConfig& config);

// LIBSVM data: `train_images` names one file (sharded by record) or a list
// `name-00000,...` (sharded by file suffix).
struct SparseTrainData {
  std::unique_ptr<SparseDataset> shard;
  std::vector<int64_t> records_per_trainer;
  // All the training files, not only this trainer's: the same on every
  // trainer.
  LibsvmSummary summary;
};
absl::StatusOr<SparseTrainData> LoadSparseTrainData(const DataConfig& config,
                                                    int trainer_id,
                                                    int num_trainers);
absl::StatusOr<std::unique_ptr<SparseDataset>> LoadSparseTestData(
    const DataConfig& config);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_DATASET_LOADER_H_
