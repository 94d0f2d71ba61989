#include "trainer/data/data_shard.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"

namespace shardps {
namespace {

// SplitMix64 finalizer, as in model.cc.
uint64_t Mix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, n) by rejection, so identical on any machine.
// REQUIRES: n > 0.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  // Values below `threshold` would make the top bucket short.
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

}  // namespace

std::vector<std::string> SplitFileList(const std::string& comma_separated) {
  std::vector<std::string> files;
  for (absl::string_view part : absl::StrSplit(comma_separated, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) files.emplace_back(part);
  }
  return files;
}

absl::StatusOr<int> ParseShardSuffix(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string base =
      slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dash = base.find_last_of('-');
  if (dash != std::string::npos) {
    size_t end = dash + 1;
    while (end < base.size() && absl::ascii_isdigit(base[end])) ++end;
    const size_t digits = end - dash - 1;
    int shard = 0;
    if (digits > 0 && digits <= 9 && (end == base.size() || base[end] == '.') &&
        absl::SimpleAtoi(base.substr(dash + 1, digits), &shard)) {
      return shard;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path,
                   ": no shard suffix; want a name like "
                   "train-00003 or train-00003.gz"));
}

absl::StatusOr<std::vector<std::string>> FilesForTrainer(
    const std::vector<std::string>& files, int trainer_id, int num_trainers) {
  if (num_trainers < 1 || trainer_id < 0 || trainer_id >= num_trainers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer_id ", trainer_id, " outside [0, ", num_trainers, ")"));
  }
  absl::flat_hash_map<int, std::string> seen;
  std::vector<std::string> mine;
  for (const std::string& file : files) {
    absl::StatusOr<int> shard = ParseShardSuffix(file);
    if (!shard.ok()) return shard.status();
    auto [it, inserted] = seen.emplace(*shard, file);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, " and ", it->second, " have the same shard number ", *shard));
    }
    if (*shard % num_trainers == trainer_id) mine.push_back(file);
  }
  return mine;
}

std::vector<int64_t> RecordsPerTrainer(int64_t total_records,
                                       int num_trainers) {
  std::vector<int64_t> counts(std::max(num_trainers, 0));
  for (int t = 0; t < num_trainers; ++t) {
    counts[t] = total_records / num_trainers +
                (t < total_records % num_trainers ? 1 : 0);
  }
  return counts;
}

absl::StatusOr<std::unique_ptr<ShardedDataset>> ShardedDataset::Create(
    IdxData data, ShardMode mode, int trainer_id, int num_trainers) {
  if (num_trainers < 1 || trainer_id < 0 || trainer_id >= num_trainers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer_id ", trainer_id, " outside [0, ", num_trainers, ")"));
  }
  if (data.num_records < 0 || data.dim < 0 ||
      data.features.size() !=
          static_cast<size_t>(data.num_records) * data.dim ||
      data.labels.size() != static_cast<size_t>(data.num_records)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data set of ", data.num_records, " records of dim ", data.dim, " has ",
        data.features.size(), " features and ", data.labels.size(), " labels"));
  }
  std::vector<int64_t> local;
  const int64_t first = mode == ShardMode::kByRecord ? trainer_id : 0;
  const int64_t stride = mode == ShardMode::kByRecord ? num_trainers : 1;
  for (int64_t r = first; r < data.num_records; r += stride) local.push_back(r);
  return std::unique_ptr<ShardedDataset>(
      new ShardedDataset(std::move(data), std::move(local)));
}

ShardedDataset::ShardedDataset(IdxData data, std::vector<int64_t> local)
    : data_(std::move(data)), local_(std::move(local)), order_(local_) {}

void ShuffleForPass(std::vector<int64_t>* order, int pass, uint64_t seed) {
  // Fisher-Yates with our own bounded draw (std::shuffle's use of the
  // generator is implementation-defined).
  std::mt19937_64 rng(Mix(seed, static_cast<uint64_t>(pass)));
  for (size_t i = order->size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(UniformBelow(rng, i));
    std::swap((*order)[i - 1], (*order)[j]);
  }
}

void ShardedDataset::StartPass(int pass, bool shuffle, uint64_t seed) {
  order_ = local_;
  if (shuffle) ShuffleForPass(&order_, pass, seed);
}

void ShardedDataset::GetBatch(int64_t batch_index, int batch_size, float* x,
                              int32_t* labels) const {
  const int64_t begin = batch_index * batch_size;
  CHECK_GE(batch_index, 0);
  CHECK_LE(begin + batch_size, num_local_records());
  const size_t dim = static_cast<size_t>(data_.dim);
  for (int i = 0; i < batch_size; ++i) {
    const int64_t r = order_[begin + i];
    std::memcpy(x + i * dim, data_.features.data() + r * dim,
                dim * sizeof(float));
    labels[i] = data_.labels[r];
  }
}

int64_t ShardedDataset::StepsPerPass(
    const std::vector<int64_t>& records_per_trainer, int batch_size) {
  if (records_per_trainer.empty() || batch_size <= 0) return 0;
  int64_t steps = std::numeric_limits<int64_t>::max();
  for (int64_t records : records_per_trainer) {
    steps = std::min(steps, records / batch_size);
  }
  return steps;
}

}  // namespace shardps
