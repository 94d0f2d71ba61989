#ifndef SHARDPS_TRAINER_DATA_DATA_SHARD_H_
#define SHARDPS_TRAINER_DATA_DATA_SHARD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/idx_reader.h"

namespace shardps {

// Splits "a,b, c" into {"a", "b", "c"}; whitespace is trimmed and empty
// entries are dropped.
std::vector<std::string> SplitFileList(const std::string& comma_separated);

// The shard number of a file named `name-<digits>` or `name-<digits>.<ext>`
// (any directory is ignored): "train-00003.gz" -> 3. InvalidArgument
// otherwise.
absl::StatusOr<int> ParseShardSuffix(const std::string& path);

// The files of `files` that trainer `trainer_id` of `num_trainers` reads:
// those whose shard suffix i has i mod num_trainers == trainer_id, in the
// order given. InvalidArgument if a file has no shard suffix, two files share
// one, or trainer_id is out of range. (A single file is not sharded by file;
// see ShardedDataset::ShardMode::kByRecord.)
absl::StatusOr<std::vector<std::string>> FilesForTrainer(
    const std::vector<std::string>& files, int trainer_id, int num_trainers);

// Records per trainer when `total_records` are sharded by record (record r to
// trainer r mod num_trainers).
std::vector<int64_t> RecordsPerTrainer(int64_t total_records, int num_trainers);

// Permutes `order` with a permutation that depends only on (seed, pass)
// and is the same on any machine.
void ShuffleForPass(std::vector<int64_t>* order, int pass, uint64_t seed);

// A trainer's share of a data set and its batching order. Requires external
// synchronization.
class ShardedDataset {
 public:
  enum class ShardMode {
    kByRecord,  // `data` is the whole set; keep records r % N == trainer_id
    kByFile,    // `data` holds only this trainer's files; keep every record
  };

  // Takes `data`. InvalidArgument if num_trainers < 1, trainer_id is outside
  // [0, num_trainers) or the feature buffer does not match num_records * dim.
  static absl::StatusOr<std::unique_ptr<ShardedDataset>> Create(
      IdxData data, ShardMode mode, int trainer_id, int num_trainers);

  ShardedDataset(const ShardedDataset&) = delete;
  ShardedDataset& operator=(const ShardedDataset&) = delete;

  int64_t num_local_records() const {
    return static_cast<int64_t>(order_.size());
  }
  int dim() const { return data_.dim; }
  int num_classes() const { return data_.num_classes; }

  // Sets the local order for a pass: the natural (file) order, or, with
  // `shuffle`, a permutation that depends only on (seed, pass) and is the
  // same on any machine.
  void StartPass(int pass, bool shuffle, uint64_t seed);

  // Copies the records at positions [batch_index * batch_size,
  // (batch_index + 1) * batch_size) of the local order into x (batch_size x
  // dim) and labels (batch_size).
  // REQUIRES: (batch_index + 1) * batch_size <= num_local_records().
  void GetBatch(int64_t batch_index, int batch_size, float* x,
                int32_t* labels) const;

  // Steps every trainer of a synchronous job takes per pass: the minimum over
  // trainers of floor(records / batch_size) (the last partial batch is
  // dropped).
  static int64_t StepsPerPass(const std::vector<int64_t>& records_per_trainer,
                              int batch_size);

 private:
  ShardedDataset(IdxData data, std::vector<int64_t> local);

  const IdxData data_;
  const std::vector<int64_t> local_;  // record indices this trainer owns
  std::vector<int64_t> order_;        // local_ in this pass's order
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_DATA_SHARD_H_
