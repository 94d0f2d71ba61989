// SparseTableBlob: a sparse table's checkpoint blobs (SPT2,
// docs/checkpoint_format.md): whole saves, streaming saves a stripe at a
// time, and restores.
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/storage/blob_io.h"
#include "glog/logging.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {
namespace {

// "SPT2". The header counts the stripe groups that follow, so a blob cut
// at a group boundary is detected.
constexpr uint32_t kSparseMagic = 0x53505432;

// Reads the header SaveHeader writes from `r` and returns its group count:
// DATA_LOSS when it is malformed or its rows are not of `dim` values and
// `row_floats` floats of state.
absl::StatusOr<uint64_t> ReadSparseHeader(BlobReader& r, int32_t dim,
                                          int32_t row_floats) {
  uint32_t magic = 0;
  int32_t their_dim = 0, their_row_floats = 0;
  uint64_t groups = 0;
  if (!r.Get(&magic) || magic != kSparseMagic || !r.Get(&their_dim) ||
      !r.Get(&their_row_floats) || !r.Get(&groups)) {
    return absl::DataLossError("sparse table checkpoint: bad header");
  }
  if (their_dim != dim || their_row_floats != row_floats) {
    return absl::DataLossError(absl::StrCat(
        "sparse table checkpoint: rows of dim ", their_dim, " with ",
        their_row_floats, " floats of state; this table has dim ", dim, " and ",
        row_floats));
  }
  return groups;
}

}  // namespace

std::string SparseTableBlob::Header(const SparseTable& t, int copies) {
  std::string out;
  AppendPod(&out, kSparseMagic);
  AppendPod<int32_t>(&out, t.dim_);
  AppendPod<int32_t>(&out, t.row_floats_);
  AppendPod<uint64_t>(&out,
                      (t.stripes_.size() +
                       static_cast<size_t>(SparseTableDisk::ExtraGroups(t))) *
                          copies);
  return out;
}

void SparseTableBlob::AppendGroup(const SparseTable& t,
                                  const SparseTable::Stripe& s,
                                  std::string* out) {
  AppendPod<uint64_t>(out, s.rows.size());
  std::vector<float> scratch(t.row_floats_);
  s.rows.ForEach([&](uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const SparseTable::RowMeta m = t.MetaOf(s, slot);
    AppendPod(out, m.key);
    AppendPod(out, m.last_step);
    AppendPod(out, m.updates);
    AppendFloats(out, s.rows.Floats(slot, t.row_floats_, scratch.data()),
                 t.row_floats_);
  });
  AppendPod<uint64_t>(out, static_cast<uint64_t>(s.sightings.size()));
  s.sightings.ForEach([out](uint64_t key, const Sighting& seen) {
    AppendPod(out, key);
    AppendPod(out, seen.count);
    AppendPod(out, seen.last_step);
  });
}

absl::Status SparseTableBlob::Serialize(const SparseTable& t,
                                        std::string* out) {
  out->append(Header(t, 1));
  if (t.store_ != nullptr) return SparseTableDisk::Serialize(t, out);
  for (const SparseTable::Stripe& s : t.stripes_) {
    absl::MutexLock l(&s.mu);
    AppendGroup(t, s, out);
  }
  return absl::OkStatus();
}

void SparseTableBlob::MarkForSave(SparseTable& t, SaveSink* sink,
                                  uint32_t table_id, bool delta) {
  if (t.store_ != nullptr) {
    return SparseTableDisk::MarkForSave(t, sink, table_id, delta);
  }
  for (SparseTable::Stripe& s : t.stripes_) {
    absl::MutexLock l(&s.mu);
    s.pending_save = sink;
    s.pending_table = table_id;
    s.pending_delta = delta;
  }
}

void SparseTableBlob::SaveIfPending(const SparseTable& t,
                                    SparseTable::Stripe& s) {
  if (s.pending_save == nullptr) return;
  std::string group;
  if (s.pending_delta) {
    if (absl::Status st = SparseDeltas::AppendGroup(t, s, &group); !st.ok()) {
      LOG(ERROR) << "sparse table: a delta checkpoint: " << st;
      s.pending_save->Fail(s.pending_table, st);
    }
  } else {
    group.reserve(16 + s.rows.size() * (24 + sizeof(float) * t.row_floats_) +
                  static_cast<size_t>(s.sightings.size()) * 24);
    AppendGroup(t, s, &group);
  }
  // Every save, whole or not, is the base of the next delta.
  s.changed.clear();
  s.pending_save->Append(s.pending_table, group);
  s.pending_save = nullptr;
  s.pending_snapshot.reset();
}

void SparseTableBlob::SaveRemaining(SparseTable& t) {
  for (SparseTable::Stripe& s : t.stripes_) {
    absl::MutexLock l(&s.mu);
    SaveIfPending(t, s);
  }
  if (t.store_ != nullptr) SparseTableDisk::SaveRemaining(t);
}

absl::Status SparseTableBlob::RestoreRow(SparseTable& t, uint64_t key,
                                         SparseTable::RowMeta meta,
                                         absl::Span<const float> row) {
  // The disk tier: restored rows go to disk (a key twice: the last wins).
  if (t.store_ != nullptr)
    return SparseTableDisk::RestoreRow(t, key, meta, row);
  SparseTable::Stripe& s = t.StripeOf(key);
  absl::MutexLock l(&s.mu);
  if (s.rows.Find(key) != SparseTable::kNoRow) {
    return absl::DataLossError("a key appears twice");
  }
  const uint32_t slot = t.NewRow(s, key);
  if (slot == SparseTable::kNoRow) {
    return absl::ResourceExhaustedError(
        "its rows need more than --max_memory_mb allows");
  }
  --s.created;  // restored, not created
  s.rows.SetFloats(slot, row.data());
  meta.key = key;
  // The row's wall clock stays the restore's (NewRow's).
  t.SetMeta(s, slot, meta);
  return absl::OkStatus();
}

void SparseTableBlob::RestoreSighting(SparseTable& t, uint64_t key,
                                      Sighting seen) {
  SparseTable::Stripe& s = t.StripeOf(key);
  absl::MutexLock l(&s.mu);
  const bool was_allocated = s.sightings.allocated();
  uint64_t dropped = 0;
  bool dropped_any = false;
  s.sightings.Set(key, seen, &dropped, &dropped_any);
  if (!was_allocated && s.sightings.allocated()) {
    if (t.budget_ != nullptr) t.budget_->Add(s.sightings.Bytes());
    s.reserved += s.sightings.Bytes();
  }
}

absl::Status SparseTableBlob::Check(const SparseTable& t,
                                    absl::string_view data) {
  BlobReader r(data);
  absl::StatusOr<uint64_t> groups = ReadSparseHeader(r, t.dim_, t.row_floats_);
  if (!groups.ok()) return groups.status();
  std::vector<float> row(t.row_floats_);
  auto bad = [](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("sparse table checkpoint: ", what));
  };
  for (uint64_t g = 0; g < *groups; ++g) {
    uint64_t n = 0;
    if (!r.Get(&n)) return bad("truncated row count");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t key = 0;
      int64_t last_step = 0, updates = 0;
      if (!r.Get(&key) || !r.Get(&last_step) || !r.Get(&updates) ||
          !r.GetFloats(row.data(), row.size())) {
        return bad("truncated row");
      }
    }
    if (!r.Get(&n)) return bad("truncated sightings count");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t key = 0;
      int64_t count = 0, last_step = 0;
      if (!r.Get(&key) || !r.Get(&count) || !r.Get(&last_step)) {
        return bad("truncated sighting");
      }
    }
  }
  if (!r.done()) return bad("trailing bytes");
  return absl::OkStatus();
}

absl::Status SparseTableBlob::Load(SparseTable& t, absl::string_view data,
                                   const SparseTable::KeyFilter& keep) {
  t.ClearStripes();
  BlobReader r(data);
  absl::StatusOr<uint64_t> groups = ReadSparseHeader(r, t.dim_, t.row_floats_);
  if (!groups.ok()) return groups.status();
  std::vector<float> row(t.row_floats_);
  auto fail = [&t](absl::string_view what,
                   absl::StatusCode code = absl::StatusCode::kDataLoss) {
    t.ClearStripes();
    return absl::Status(code, absl::StrCat("sparse table checkpoint: ", what));
  };
  // The stripe count may differ from the writer's: each row goes to the
  // stripe of its key here.
  for (uint64_t g = 0; g < *groups; ++g) {
    uint64_t rows = 0;
    if (!r.Get(&rows)) return fail("truncated row count");
    for (uint64_t i = 0; i < rows; ++i) {
      uint64_t key = 0;
      SparseTable::RowMeta m;
      if (!r.Get(&key) || !r.Get(&m.last_step) || !r.Get(&m.updates) ||
          !r.GetFloats(row.data(), row.size())) {
        return fail("truncated row");
      }
      if (keep && !keep(key)) continue;
      // Cleared outside the stripe's lock: ClearStripes takes it again.
      if (absl::Status st = RestoreRow(t, key, m, row); !st.ok()) {
        return fail(st.message(), st.code());
      }
    }
    uint64_t sightings = 0;
    if (!r.Get(&sightings)) return fail("truncated sightings count");
    for (uint64_t i = 0; i < sightings; ++i) {
      uint64_t key = 0;
      Sighting seen;
      if (!r.Get(&key) || !r.Get(&seen.count) || !r.Get(&seen.last_step)) {
        return fail("truncated sighting");
      }
      if (keep && !keep(key)) continue;
      RestoreSighting(t, key, seen);
    }
  }
  if (!r.done()) return fail("trailing bytes");
  if (t.store_ != nullptr) {
    if (absl::Status st = SparseTableDisk::FinishRestore(t); !st.ok()) {
      return fail(st.message(), st.code());
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
