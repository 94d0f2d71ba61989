#include "pserver/table_snapshot.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/blob_io.h"

namespace shardps {
namespace {

constexpr uint32_t kDenseMagic = 0x44534e31;  // "DSN1"

}  // namespace

std::string TableFileName(size_t table_id) {
  return absl::StrCat("table-", table_id, ".bin");
}

DenseBlobWriter::DenseBlobWriter(uint32_t num_blocks) {
  AppendPod(&blob_, kDenseMagic);
  AppendPod(&blob_, num_blocks);
}

void DenseBlobWriter::Add(uint32_t index, int64_t version,
                          absl::Span<const float> value,
                          const std::vector<std::vector<float>>& slots) {
  AppendPod<uint32_t>(&blob_, index);
  AppendPod<int64_t>(&blob_, version);
  AppendPod<int64_t>(&blob_, static_cast<int64_t>(value.size()));
  AppendPod<uint32_t>(&blob_, static_cast<uint32_t>(slots.size()));
  AppendFloats(&blob_, value.data(), value.size());
  for (const auto& slot : slots) AppendFloats(&blob_, slot.data(), slot.size());
}

absl::StatusOr<std::vector<DenseBlockImage>> ParseDenseBlob(
    absl::string_view name, absl::string_view blob,
    const absl::flat_hash_map<uint32_t, int64_t>& block_sizes, int num_slots) {
  BlobReader r(blob);
  uint32_t magic = 0, n = 0;
  if (!r.Get(&magic) || magic != kDenseMagic || !r.Get(&n)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint: ", name, ": bad header"));
  }
  std::vector<DenseBlockImage> out;
  absl::flat_hash_set<uint32_t> seen;
  for (uint32_t j = 0; j < n; ++j) {
    DenseBlockImage b;
    uint32_t nslots = 0;
    int64_t size = 0;
    if (!r.Get(&b.index) || !r.Get(&b.version) || !r.Get(&size) ||
        !r.Get(&nslots) || !r.GetFloats(&b.value, size)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", name, ": truncated block"));
    }
    auto it = block_sizes.find(b.index);
    if (it == block_sizes.end() || it->second != size ||
        nslots != static_cast<uint32_t>(num_slots)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", name, ": block ", b.index,
                       " does not match the job (size or optimizer state)"));
    }
    if (!seen.insert(b.index).second) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", name, ": block ",
                                              b.index, " appears twice"));
    }
    b.slots.resize(nslots);
    for (auto& slot : b.slots) {
      if (!r.GetFloats(&slot, size)) {
        return absl::DataLossError(
            absl::StrCat("checkpoint: ", name, ": truncated block"));
      }
    }
    out.push_back(std::move(b));
  }
  if (!r.done()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint: ", name, ": trailing bytes"));
  }
  return out;
}

}  // namespace shardps
