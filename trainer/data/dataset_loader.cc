#include "trainer/data/dataset_loader.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace shardps {
namespace {

float Scale(const DataConfig& c) {
  return c.scale() != 0 ? c.scale() : 1.0f / 255.0f;
}

absl::Status Append(IdxData part, IdxData* all) {
  if (all->num_records == 0) {
    *all = std::move(part);
    return absl::OkStatus();
  }
  if (part.dim != all->dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("data files disagree on the record size: ", all->dim,
                     " vs ", part.dim));
  }
  all->num_records += part.num_records;
  all->features.insert(all->features.end(), part.features.begin(),
                       part.features.end());
  all->labels.insert(all->labels.end(), part.labels.begin(), part.labels.end());
  all->num_classes = std::max(all->num_classes, part.num_classes);
  return absl::OkStatus();
}

// Pairs image and label files by shard suffix.
absl::StatusOr<std::map<int, std::pair<std::string, std::string>>> PairFiles(
    const std::vector<std::string>& images,
    const std::vector<std::string>& labels) {
  if (images.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: ", images.size(), " image files but ",
                     labels.size(), " label files"));
  }
  std::map<int, std::pair<std::string, std::string>> pairs;
  for (const auto& f : images) {
    ASSIGN_OR_RETURN(int shard, ParseShardSuffix(f));
    if (!pairs.emplace(shard, std::make_pair(f, std::string())).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("data: two image files have shard ", shard));
    }
  }
  for (const auto& f : labels) {
    ASSIGN_OR_RETURN(int shard, ParseShardSuffix(f));
    auto it = pairs.find(shard);
    if (it == pairs.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data: label file ", f, " has no image file of shard ", shard));
    }
    it->second.second = f;
  }
  return pairs;
}

}  // namespace

absl::StatusOr<TrainData> LoadTrainData(const DataConfig& config,
                                        int trainer_id, int num_trainers) {
  const auto images = SplitFileList(config.train_images());
  const auto labels = SplitFileList(config.train_labels());
  if (images.empty() || labels.empty()) {
    return absl::InvalidArgumentError(
        "data: train_images and train_labels must name files");
  }
  TrainData out;
  if (images.size() == 1 && labels.size() == 1) {
    ASSIGN_OR_RETURN(IdxData all, ReadIdxImagesAndLabels(images[0], labels[0],
                                                         Scale(config)));
    out.records_per_trainer = RecordsPerTrainer(all.num_records, num_trainers);
    ASSIGN_OR_RETURN(
        out.shard, ShardedDataset::Create(std::move(all),
                                          ShardedDataset::ShardMode::kByRecord,
                                          trainer_id, num_trainers));
    return out;
  }
  ASSIGN_OR_RETURN(auto pairs, PairFiles(images, labels));
  out.records_per_trainer.assign(num_trainers, 0);
  IdxData mine;
  for (const auto& [shard, files] : pairs) {
    const int owner = shard % num_trainers;
    ASSIGN_OR_RETURN(int64_t n, ReadIdxRecordCount(files.first));
    out.records_per_trainer[owner] += n;
    if (owner != trainer_id) continue;
    ASSIGN_OR_RETURN(
        IdxData part,
        ReadIdxImagesAndLabels(files.first, files.second, Scale(config)));
    RETURN_IF_ERROR(Append(std::move(part), &mine));
  }
  if (mine.num_records == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: no training file has a shard suffix i with i mod ", num_trainers,
        " == ", trainer_id, "; trainer ", trainer_id, " would have no data"));
  }
  ASSIGN_OR_RETURN(out.shard,
                   ShardedDataset::Create(std::move(mine),
                                          ShardedDataset::ShardMode::kByFile,
                                          trainer_id, num_trainers));
  return out;
}

absl::StatusOr<IdxData> LoadTestData(const DataConfig& config) {
  const auto images = SplitFileList(config.test_images());
  const auto labels = SplitFileList(config.test_labels());
  if (images.size() != labels.size()) {
    return absl::InvalidArgumentError(
        "data: test_images and test_labels list different numbers of files");
  }
  IdxData all;
  for (size_t i = 0; i < images.size(); ++i) {
    ASSIGN_OR_RETURN(IdxData part, ReadIdxImagesAndLabels(images[i], labels[i],
                                                          Scale(config)));
    RETURN_IF_ERROR(Append(std::move(part), &all));
  }
  return all;
}

absl::StatusOr<SparseTrainData> LoadSparseTrainData(const DataConfig& config,
                                                    int trainer_id,
                                                    int num_trainers) {
  const auto files = SplitFileList(config.train_images());
  if (files.empty()) {
    return absl::InvalidArgumentError(
        "data: train_images must name the libsvm training file(s)");
  }
  SparseTrainData out;
  if (files.size() == 1) {
    RETURN_IF_ERROR(SummarizeLibsvm(files[0], &out.summary));
    out.records_per_trainer =
        RecordsPerTrainer(out.summary.records, num_trainers);
    LibsvmReadOptions options;
    options.shard_index = trainer_id;
    options.num_shards = num_trainers;
    ASSIGN_OR_RETURN(SparseData mine, ReadLibsvm(files[0], options));
    out.shard = std::make_unique<SparseDataset>(std::move(mine));
    return out;
  }
  out.records_per_trainer.assign(num_trainers, 0);
  for (const auto& f : files) {
    ASSIGN_OR_RETURN(int shard, ParseShardSuffix(f));
    const int64_t before = out.summary.records;
    RETURN_IF_ERROR(SummarizeLibsvm(f, &out.summary));
    out.records_per_trainer[shard % num_trainers] +=
        out.summary.records - before;
  }
  ASSIGN_OR_RETURN(auto mine_files,
                   FilesForTrainer(files, trainer_id, num_trainers));
  if (mine_files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data: no training file has a shard suffix i with i mod ",
                     num_trainers, " == ", trainer_id));
  }
  ASSIGN_OR_RETURN(SparseData mine, ReadLibsvmFiles(mine_files));
  out.shard = std::make_unique<SparseDataset>(std::move(mine));
  return out;
}

absl::StatusOr<std::unique_ptr<SparseDataset>> LoadSparseTestData(
    const DataConfig& config) {
  const auto files = SplitFileList(config.test_images());
  if (files.empty()) return std::make_unique<SparseDataset>(SparseData{});
  ASSIGN_OR_RETURN(SparseData all, ReadLibsvmFiles(files));
  return std::make_unique<SparseDataset>(std::move(all));
}

}  // namespace shardps
