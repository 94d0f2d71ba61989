#include "pserver/store/table_snapshot.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/blob_io.h"

namespace shardps {
namespace {

constexpr uint32_t kDenseMagic = 0x44534e31;  // "DSN1"

}  // namespace

std::string TableFileName(size_t table_id) {
  return absl::StrCat("table-", table_id, ".bin");
}

std::string DenseBlobHeader(uint32_t num_blocks) {
  std::string out;
  AppendPod(&out, kDenseMagic);
  AppendPod(&out, num_blocks);
  return out;
}

void AppendDenseRecord(std::string* out, uint32_t index, int64_t version,
                       absl::Span<const float> value,
                       const std::vector<std::vector<float>>& slots) {
  AppendPod<uint32_t>(out, index);
  AppendPod<int64_t>(out, version);
  AppendPod<int64_t>(out, static_cast<int64_t>(value.size()));
  AppendPod<uint32_t>(out, static_cast<uint32_t>(slots.size()));
  AppendFloats(out, value.data(), value.size());
  for (const auto& slot : slots) AppendFloats(out, slot.data(), slot.size());
}

DenseBlobWriter::DenseBlobWriter(uint32_t num_blocks)
    : blob_(DenseBlobHeader(num_blocks)) {}

void DenseBlobWriter::Add(uint32_t index, int64_t version,
                          absl::Span<const float> value,
                          const std::vector<std::vector<float>>& slots) {
  AppendDenseRecord(&blob_, index, version, value, slots);
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

absl::Status CheckStepBoundary(const JobTables& tables, int64_t step) {
  for (BarrierUnit* u : tables.units()) {
    absl::MutexLock l(&u->mu);
    if (u->barrier.version() != step) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", step, ": ", u->name(), " is at version ",
          u->barrier.version(), " (not a step boundary)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> EncodeTable(const JobTables& tables,
                                        uint32_t table_id) {
  std::string blob;
  if (auto shard = tables.FindSparse(table_id); shard.ok()) {
    // A replicated job's shards of the table share its blob: one header
    // for all, then each shard's groups.
    std::vector<const SparseShard*> shards;
    for (const SparseShard* s : tables.sparse()) {
      if (s->table_id() == table_id) shards.push_back(s);
    }
    const std::string header =
        (*shard)->rows().SaveHeader(static_cast<int>(shards.size()));
    blob = header;
    for (const SparseShard* s : shards) {
      std::string one;
      RETURN_IF_ERROR(s->rows().Serialize(&one));
      blob.append(one, header.size(), std::string::npos);
    }
    return blob;
  }
  uint32_t n = 0;
  for (const DenseTableBlock* b : tables.blocks())
    n += b->table_id() == table_id;
  DenseBlobWriter writer(n);
  for (const DenseTableBlock* b : tables.blocks()) {
    if (b->table_id() != table_id) continue;
    absl::MutexLock l(&b->mu);
    writer.Add(b->index(), b->barrier.version(), b->value, b->slots);
  }
  return std::move(writer).Finish();
}

absl::StatusOr<ParsedSnapshot> ParseSnapshot(const StoreSnapshot& snap,
                                             const JobTables& tables) {
  const size_t num_tables = tables.num_tables();
  ParsedSnapshot out;
  out.dense.resize(num_tables);
  out.sparse.assign(num_tables, nullptr);
  std::vector<uint8_t> seen(num_tables, 0);
  for (const auto& [name, blob] : snap.files) {
    size_t id = 0;
    while (id < num_tables && name != TableFileName(id)) ++id;
    if (id == num_tables) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: unexpected file ", name));
    }
    if (seen[id]++) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", name, " appears twice"));
    }
    if (auto shard = tables.FindSparse(id); shard.ok()) {
      if (absl::Status v = (*shard)->Verify(blob); !v.ok()) {
        return absl::DataLossError(
            absl::StrCat("checkpoint: ", name, ": ", v.message()));
      }
      out.sparse[id] = &blob;
      continue;
    }
    ASSIGN_OR_RETURN(out.dense[id],
                     ParseDenseBlob(name, blob, tables.BlockSizes(id),
                                    tables.num_slots(id)));
    out.dense_blocks += out.dense[id].size();
  }
  if (out.dense_blocks != tables.blocks().size()) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint: holds ", out.dense_blocks,
        " dense blocks, the job places ", tables.blocks().size(), " here"));
  }
  for (const SparseShard* s : tables.sparse()) {
    if (out.sparse[s->table_id()] == nullptr) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: no file for table ", s->table_name()));
    }
  }
  return out;
}

}  // namespace shardps
