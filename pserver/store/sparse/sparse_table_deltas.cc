#include <cstring>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/blob_io.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {
namespace {

constexpr uint32_t kDeltaMagic = 0x53504431;  // "SPD1"

// Walks a delta's records. `row` gets each row's key and bytes (last step,
// updates, floats), `sighting` each sighting's key, count and last step,
// `removed` each removed key.
absl::Status Walk(
    absl::string_view blob, int32_t dim, int32_t row_floats,
    const std::function<absl::Status(uint64_t, absl::string_view)>& row,
    const std::function<absl::Status(uint64_t, int64_t, int64_t)>& sighting,
    const std::function<absl::Status(uint64_t)>& removed) {
  BlobReader r(blob);
  uint32_t magic = 0;
  int32_t d = 0, width = 0;
  uint64_t groups = 0;
  if (!r.Get(&magic) || magic != kDeltaMagic || !r.Get(&d) || !r.Get(&width) ||
      !r.Get(&groups)) {
    return absl::DataLossError("sparse delta: bad header");
  }
  if (d != dim || width != row_floats) {
    return absl::DataLossError(
        absl::StrCat("sparse delta: rows of dim ", d, " with ", width,
                     " floats; this table has dim ", dim, " and ", row_floats));
  }
  const size_t row_bytes = 16 + sizeof(float) * row_floats;
  std::string buf(row_bytes, '\0');
  for (uint64_t g = 0; g < groups; ++g) {
    uint64_t n = 0;
    if (!r.Get(&n)) return absl::DataLossError("sparse delta: truncated");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t key = 0;
      if (!r.Get(&key) ||
          !r.GetFloats(reinterpret_cast<float*>(buf.data()), row_bytes / 4)) {
        return absl::DataLossError("sparse delta: truncated row");
      }
      RETURN_IF_ERROR(row(key, buf));
    }
    if (!r.Get(&n)) return absl::DataLossError("sparse delta: truncated");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t key = 0;
      int64_t count = 0, last = 0;
      if (!r.Get(&key) || !r.Get(&count) || !r.Get(&last)) {
        return absl::DataLossError("sparse delta: truncated sighting");
      }
      RETURN_IF_ERROR(sighting(key, count, last));
    }
    if (!r.Get(&n)) return absl::DataLossError("sparse delta: truncated");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t key = 0;
      if (!r.Get(&key)) return absl::DataLossError("sparse delta: truncated");
      RETURN_IF_ERROR(removed(key));
    }
  }
  if (!r.done()) return absl::DataLossError("sparse delta: trailing bytes");
  return absl::OkStatus();
}

}  // namespace

std::string SparseDeltas::Header(const SparseTable& t, int copies) {
  std::string out;
  AppendPod(&out, kDeltaMagic);
  AppendPod<int32_t>(&out, t.dim_);
  AppendPod<int32_t>(&out, t.row_floats_);
  AppendPod<uint64_t>(&out, t.stripes_.size() * copies);
  return out;
}

absl::Status SparseDeltas::AppendGroup(const SparseTable& t,
                                       const SparseTable::Stripe& s,
                                       std::string* out) {
  std::string rows, sightings, removed;
  uint64_t num_rows = 0, num_sightings = 0, num_removed = 0;
  std::vector<float> scratch(t.row_floats_);
  // The disk tier: changed keys in neither; their rows may be on disk.
  std::vector<uint64_t> elsewhere;
  for (uint64_t key : s.changed) {
    if (const uint32_t slot = s.rows.Find(key); slot != SparseTable::kNoRow) {
      const SparseTable::RowMeta m = t.MetaOf(s, slot);
      AppendPod(&rows, key);
      AppendPod(&rows, m.last_step);
      AppendPod(&rows, m.updates);
      AppendFloats(&rows, s.rows.Floats(slot, t.row_floats_, scratch.data()),
                   t.row_floats_);
      ++num_rows;
    } else if (const Sighting* seen = s.sightings.Find(key)) {
      AppendPod(&sightings, key);
      AppendPod(&sightings, seen->count);
      AppendPod(&sightings, seen->last_step);
      ++num_sightings;
    } else {
      elsewhere.push_back(key);
    }
  }
  RETURN_IF_ERROR(SparseTableDisk::AppendChanged(t, s.pending_snapshot.get(),
                                                 elsewhere, &rows, &num_rows,
                                                 &removed, &num_removed));
  AppendPod(out, num_rows);
  out->append(rows);
  AppendPod(out, num_sightings);
  out->append(sightings);
  AppendPod(out, num_removed);
  out->append(removed);
  return absl::OkStatus();
}

absl::Status SparseDeltas::Verify(const SparseTable& t,
                                  absl::string_view blob) {
  absl::flat_hash_set<uint64_t> seen;
  auto once = [&seen](uint64_t key) {
    if (!seen.insert(key).second) {
      return absl::DataLossError(
          absl::StrCat("sparse delta: key ", key, " appears twice"));
    }
    return absl::OkStatus();
  };
  return Walk(
      blob, t.dim_, t.row_floats_,
      [&](uint64_t key, absl::string_view) { return once(key); },
      [&](uint64_t key, int64_t, int64_t) { return once(key); }, once);
}

absl::Status SparseDeltas::DropRow(SparseTable& t, SparseTable::Stripe& s,
                                   uint64_t key) {
  const uint32_t slot = s.rows.Find(key);
  if (slot != SparseTable::kNoRow) s.rows.Remove(key, slot);
  if (t.store_ == nullptr) return absl::OkStatus();
  SparseTableDisk::Unlook(s, key);  // what a pull found is gone
  return SparseTableDisk::DropRow(t, key);
}

absl::Status SparseDeltas::Apply(SparseTable* t, absl::string_view blob,
                                 const SparseTable::KeyFilter& keep) {
  std::vector<float> floats(t->row_floats_);
  auto row = [&](uint64_t key, absl::string_view bytes) -> absl::Status {
    if (keep && !keep(key)) return absl::OkStatus();
    SparseTable::RowMeta m;
    m.key = key;
    std::memcpy(&m.last_step, bytes.data(), 8);
    std::memcpy(&m.updates, bytes.data() + 8, 8);
    std::memcpy(floats.data(), bytes.data() + 16,
                sizeof(float) * t->row_floats_);
    SparseTable::Stripe& s = t->StripeOf(key);
    if (t->store_ != nullptr) {
      {
        absl::MutexLock l(&s.mu);
        s.sightings.Erase(key);
      }
      return SparseTableDisk::RestoreRow(*t, key, m, floats);
    }
    absl::MutexLock l(&s.mu);
    s.sightings.Erase(key);
    uint32_t slot = s.rows.Find(key);
    if (slot == SparseTable::kNoRow) {
      slot = t->NewRow(s, key);
      if (slot == SparseTable::kNoRow) {
        return absl::ResourceExhaustedError(
            "sparse delta: its rows need more than --max_memory_mb allows");
      }
      --s.created;  // restored, not created
    }
    t->SetMeta(s, slot, m);
    s.rows.SetFloats(slot, floats.data());
    return absl::OkStatus();
  };
  auto sighting = [&](uint64_t key, int64_t count,
                      int64_t last) -> absl::Status {
    if (keep && !keep(key)) return absl::OkStatus();
    {
      SparseTable::Stripe& s = t->StripeOf(key);
      absl::MutexLock l(&s.mu);
      RETURN_IF_ERROR(DropRow(*t, s, key));
    }
    SparseTableBlob::RestoreSighting(*t, key, Sighting{count, last});
    return absl::OkStatus();
  };
  auto removed = [&](uint64_t key) -> absl::Status {
    if (keep && !keep(key)) return absl::OkStatus();
    SparseTable::Stripe& s = t->StripeOf(key);
    absl::MutexLock l(&s.mu);
    s.sightings.Erase(key);
    return DropRow(*t, s, key);
  };
  RETURN_IF_ERROR(Walk(blob, t->dim_, t->row_floats_, row, sighting, removed));
  return t->store_ != nullptr ? SparseTableDisk::FinishRestore(*t)
                              : absl::OkStatus();
}

}  // namespace shardps
