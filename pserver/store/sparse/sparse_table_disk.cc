// SparseTableDisk: a sparse table's disk tier (docs/sparse_memory.md,
// "Disk tier"): rows moving between the stripes and a RowStore, the pulls
// of rows on disk, and the disk's part of saves and restores.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/blob_io.h"
#include "glog/logging.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {
namespace {

// Rows a restore writes to disk in one batch.
constexpr int kRestoreBatchRows = 4096;

// A row of an SPT2 group: key, last step, updates, then its floats.
void AppendRowRecord(std::string* out, uint64_t key, int64_t last_step,
                     int64_t updates, const float* row, int n) {
  AppendPod(out, key);
  AppendPod(out, last_step);
  AppendPod(out, updates);
  AppendFloats(out, row, n);
}

// Whether `bytes`, read from disk for `key`, is a whole row of that key.
bool IsRowOf(uint64_t key, absl::string_view bytes, int64_t row_bytes) {
  if (bytes.size() != static_cast<size_t>(row_bytes)) return false;
  RowHead head;
  std::memcpy(&head, bytes.data(), sizeof(head));
  return head.key == key;
}

}  // namespace

void SparseTableDisk::ReadMisses(const SparseTable& t,
                                 absl::Span<const uint64_t> keys,
                                 absl::Span<const uint32_t> misses, float* out,
                                 absl::Span<const int64_t> spills) {
  if (misses.empty()) return;
  std::vector<uint64_t> want(misses.size());
  for (size_t i = 0; i < misses.size(); ++i) want[i] = keys[misses[i]];
  std::vector<std::string> rows;
  std::vector<bool> found;
  if (absl::Status st = t.store_->MultiGet(want, &rows, &found); !st.ok()) {
    t.read_errors_ += static_cast<int64_t>(want.size());
    LOG_EVERY_T(ERROR, 10) << "sparse table: " << st << "; the " << want.size()
                           << " rows of a pull not in memory read as their "
                              "initial values";
    for (size_t i = 0; i < want.size(); ++i)
      t.InitialRow(want[i], out + static_cast<size_t>(misses[i]) * t.dim_);
    return;  // and nothing is noted absent
  }
  // Rows read well (or found absent) are kept for the push; a damaged one
  // is not: the push reads it again, and Usable counts it and drops its
  // updates, rather than a fresh row silently taking its place.
  size_t kept = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    float* dst = out + static_cast<size_t>(misses[i]) * t.dim_;
    if (!found[i]) {
      t.InitialRow(want[i], dst);
    } else if (IsRowOf(want[i], rows[i], t.row_bytes_)) {
      t.codec_.Decode(rows[i].data() + sizeof(RowHead), t.dim_, dst);
    } else {
      ++t.read_errors_;
      t.InitialRow(want[i], dst);
      continue;
    }
    want[kept] = want[i];
    if (kept != i) rows[kept] = std::move(rows[i]);
    ++kept;
  }
  want.resize(kept);
  rows.resize(kept);
  NoteLooked(t, want, &rows, spills);
}

int64_t SparseTableDisk::MaxLookedBytes(const SparseTable& t) {
  if (t.max_rows_per_stripe_ <= 0) return 1 << 20;
  return std::max<int64_t>(kMinLookedBytes,
                           t.max_rows_per_stripe_ * t.row_bytes_ / 16);
}

void SparseTableDisk::NoteLooked(const SparseTable& t,
                                 absl::Span<const uint64_t> keys,
                                 std::vector<std::string>* rows,
                                 absl::Span<const int64_t> spills) {
  const int64_t max_bytes = MaxLookedBytes(t);
  std::vector<uint32_t> order, begin;
  t.GroupByStripe(keys, &order, &begin);
  for (size_t i = 0; i < t.stripes_.size(); ++i) {
    if (begin[i] == begin[i + 1]) continue;
    SparseTable::Stripe& s = t.stripes_[i];
    absl::MutexLock l(&s.mu);
    // A row spilled since the read may be one of these keys, and newer.
    if (s.spilled != spills[i]) continue;
    for (uint32_t p = begin[i]; p < begin[i + 1]; ++p) {
      std::string& row = (*rows)[order[p]];
      const int64_t bytes = static_cast<int64_t>(row.size());
      if (s.looked.size() >= kMaxLooked) break;
      if (s.looked_bytes + bytes > max_bytes) continue;
      auto [it, added] = s.looked.try_emplace(keys[order[p]]);
      if (!added) continue;  // a key asked for twice
      it->second = std::move(row);
      s.looked_bytes += bytes;
    }
  }
}

void SparseTableDisk::Unlook(SparseTable::Stripe& s, uint64_t key) {
  auto it = s.looked.find(key);
  if (it == s.looked.end()) return;
  s.looked_bytes -= static_cast<int64_t>(it->second.size());
  s.looked.erase(it);
}

bool SparseTableDisk::Find(SparseTable& t, SparseTable::Stripe& s,
                           absl::Span<const SparseTable::NewKey> fresh,
                           std::vector<uint8_t>* fate,
                           std::vector<std::string>* rows) {
  std::vector<uint64_t> keys;
  std::vector<size_t> first;
  rows->resize(fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (i > 0 && fresh[i].key == fresh[i - 1].key) continue;
    if (auto it = s.looked.find(fresh[i].key); it != s.looked.end()) {
      // A pull read it already: on disk (its bytes) or not (empty).
      if (!it->second.empty()) {
        (*fate)[i] = SparseTable::kLoad;
        (*rows)[i] = std::move(it->second);
      }
      continue;
    }
    keys.push_back(fresh[i].key);
    first.push_back(i);
  }
  s.looked.clear();
  s.looked_bytes = 0;
  std::vector<std::string> values;
  std::vector<bool> found;
  if (absl::Status st = t.store_->MultiGet(keys, &values, &found); !st.ok()) {
    s.disk_errors += static_cast<int64_t>(keys.size());
    LOG_EVERY_T(ERROR, 10)
        << "sparse table: " << st
        << "; the updates of rows not in memory are dropped (counted as "
           "disk errors) until the disk reads again";
    return false;
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    if (!found[j]) continue;
    (*fate)[first[j]] = SparseTable::kLoad;
    (*rows)[first[j]] = std::move(values[j]);
  }
  return true;
}

bool SparseTableDisk::Usable(const SparseTable& t, SparseTable::Stripe& s,
                             uint64_t key, const std::string& bytes) {
  if (IsRowOf(key, bytes, t.row_bytes_)) return true;
  ++s.disk_errors;
  LOG_EVERY_T(ERROR, 10) << "sparse table: the row of key " << key
                         << " on disk (" << t.store_->dir() << ") is "
                         << bytes.size() << " bytes, not a row of that key ("
                         << t.row_bytes_ << " bytes); its updates are dropped";
  return false;
}

uint32_t SparseTableDisk::Load(SparseTable& t, SparseTable::Stripe& s,
                               uint64_t key, const std::string& bytes) {
  if (!t.ReserveRow(s)) return SparseTable::kNoRow;
  const uint32_t slot = s.rows.Add(key);
  std::memcpy(s.rows.Head(slot), bytes.data(), bytes.size());
  t.Stamp(s, slot, t.NowSeconds());
  ++s.loaded;
  return slot;
}

bool SparseTableDisk::Forget(SparseTable& t, SparseTable::Stripe& s,
                             absl::Span<const uint64_t> keys,
                             absl::Span<uint32_t> slots) {
  RowStore::Batch batch;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (slots[i] != SparseTable::kNoRow) batch.Delete(keys[i]);
  }
  const absl::Status st = t.store_->Write(batch);
  if (st.ok()) return true;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (slots[i] == SparseTable::kNoRow) continue;
    s.rows.Remove(keys[i], slots[i]);
    --s.loaded;
    slots[i] = SparseTable::kNoRow;
  }
  s.disk_errors += batch.count();
  LOG_EVERY_T(ERROR, 10) << "sparse table: " << st
                         << "; rows on disk cannot move to memory, and their "
                            "updates are dropped (counted as disk errors)";
  return false;
}

bool SparseTableDisk::Spill(SparseTable& t, SparseTable::Stripe& s,
                            absl::Span<const uint32_t> slots) {
  RowStore::Batch batch;
  for (uint32_t slot : slots) {
    const RowHead* head = s.rows.Head(slot);
    batch.Put(head->key, absl::string_view(reinterpret_cast<const char*>(head),
                                           t.row_bytes_));
  }
  if (absl::Status st = t.store_->Write(batch); !st.ok()) {
    s.disk_errors += batch.count();
    LOG_EVERY_T(ERROR, 10) << "sparse table: " << st
                           << "; rows stay in memory, and new rows are "
                              "refused until the disk takes writes again";
    return false;
  }
  for (uint32_t slot : slots) {
    const uint64_t key = s.rows.Head(slot)->key;
    Unlook(s, key);
    s.rows.Remove(key, slot);
  }
  s.spilled += static_cast<int64_t>(slots.size());
  return true;
}

void SparseTableDisk::MarkForSave(SparseTable& t, SaveSink* sink,
                                  uint32_t table_id,
                                  bool delta) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // A whole save not finished yet writes its disk part first.
  SaveRemaining(t);
  // Every stripe locked, so that no row is between memory and disk.
  for (SparseTable::Stripe& s : t.stripes_) s.mu.Lock();
  std::shared_ptr<const RowStore::Snapshot> snapshot = t.store_->TakeSnapshot();
  for (SparseTable::Stripe& s : t.stripes_) {
    s.pending_save = sink;
    s.pending_table = table_id;
    s.pending_delta = delta;
    s.pending_snapshot = snapshot;
  }
  for (auto it = t.stripes_.rbegin(); it != t.stripes_.rend(); ++it) {
    it->mu.Unlock();
  }
  if (delta) return;  // the changed keys on disk go with their stripes
  absl::MutexLock l(&t.disk_mu_);
  t.store_save_ = sink;
  t.store_save_table_ = table_id;
  t.store_save_snapshot_ = std::move(snapshot);
}

absl::Status SparseTableDisk::ForEachGroup(
    const SparseTable& t, const RowStore::Snapshot& snapshot,
    const std::function<void(const std::string&)>& emit) {
  std::vector<float> row(t.row_floats_);
  std::string rows, group;
  for (int bucket = 0; bucket < RowStore::kBuckets; ++bucket) {
    uint64_t n = 0;
    int64_t bad = 0;
    rows.clear();
    RETURN_IF_ERROR(t.store_->ForEachInBucket(
        bucket, snapshot, [&](uint64_t key, absl::string_view bytes) {
          if (!IsRowOf(key, bytes, t.row_bytes_)) {
            ++bad;
            return;
          }
          RowHead head;
          std::memcpy(&head, bytes.data(), sizeof(head));
          t.codec_.Decode(bytes.data() + sizeof(RowHead), t.row_floats_,
                          row.data());
          AppendRowRecord(&rows, key, head.last_step, head.updates, row.data(),
                          t.row_floats_);
          ++n;
        }));
    if (bad > 0) {
      return absl::DataLossError(
          absl::StrCat("sparse row store ", t.store_->dir(), ": ", bad,
                       " rows of the wrong size or key in bucket ", bucket));
    }
    group.clear();
    AppendPod<uint64_t>(&group, n);
    group.append(rows);
    AppendPod<uint64_t>(&group, 0);  // sightings stay in the stripes' groups
    emit(group);
  }
  return absl::OkStatus();
}

void SparseTableDisk::SaveRemaining(SparseTable& t) {
  SaveSink* sink = nullptr;
  uint32_t table_id = 0;
  std::shared_ptr<const RowStore::Snapshot> snapshot;
  {
    absl::MutexLock l(&t.disk_mu_);
    std::swap(sink, t.store_save_);
    table_id = t.store_save_table_;
    snapshot = std::move(t.store_save_snapshot_);
  }
  if (sink == nullptr) return;
  const absl::Status st = ForEachGroup(
      t, *snapshot,
      [&](const std::string& group) { sink->Append(table_id, group); });
  if (!st.ok()) {
    // The blob is short of groups: the save must not commit.
    LOG(ERROR) << "sparse table: a checkpoint cannot read the disk tier: "
               << st;
    sink->Fail(table_id, st);
  }
}

absl::Status SparseTableDisk::Serialize(const SparseTable& t, std::string* out)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (const SparseTable::Stripe& s : t.stripes_) s.mu.Lock();
  std::shared_ptr<const RowStore::Snapshot> snapshot = t.store_->TakeSnapshot();
  for (const SparseTable::Stripe& s : t.stripes_) {
    SparseTableBlob::AppendGroup(t, s, out);
  }
  for (auto it = t.stripes_.rbegin(); it != t.stripes_.rend(); ++it) {
    it->mu.Unlock();
  }
  const absl::Status st = ForEachGroup(
      t, *snapshot, [out](const std::string& group) { out->append(group); });
  if (!st.ok()) LOG(ERROR) << "sparse table: a copy of the rows: " << st;
  return st;
}

absl::Status SparseTableDisk::AppendChanged(
    const SparseTable& t, const RowStore::Snapshot* snapshot,
    absl::Span<const uint64_t> keys, std::string* rows, uint64_t* num_rows,
    std::string* removed, uint64_t* num_removed) {
  std::vector<std::string> values;
  std::vector<bool> found(keys.size(), false);
  if (t.store_ != nullptr && !keys.empty()) {
    RETURN_IF_ERROR(t.store_->MultiGet(keys, &values, &found, snapshot));
  }
  std::vector<float> row(t.row_floats_);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i]) {
      AppendPod(removed, keys[i]);
      ++*num_removed;
      continue;
    }
    if (values[i].size() != static_cast<size_t>(t.row_bytes_)) {
      return absl::DataLossError(
          absl::StrCat("sparse row store ", t.store_->dir(), ": the row of ",
                       keys[i], " is ", values[i].size(), " bytes"));
    }
    RowHead head;
    std::memcpy(&head, values[i].data(), sizeof(head));
    t.codec_.Decode(values[i].data() + sizeof(RowHead), t.row_floats_,
                    row.data());
    AppendRowRecord(rows, keys[i], head.last_step, head.updates, row.data(),
                    t.row_floats_);
    ++*num_rows;
  }
  return absl::OkStatus();
}

absl::Status SparseTableDisk::Flush(SparseTable& t, bool all) {
  if (t.restoring_ == nullptr) return absl::OkStatus();
  if (!all && t.restoring_->count() < kRestoreBatchRows) {
    return absl::OkStatus();
  }
  const absl::Status st = t.store_->Write(*t.restoring_);
  t.restoring_.reset();
  return st;
}

absl::Status SparseTableDisk::RestoreRow(SparseTable& t, uint64_t key,
                                         const SparseTable::RowMeta& meta,
                                         absl::Span<const float> row) {
  {
    // A copy in memory (a delta over a live table) gives way.
    SparseTable::Stripe& s = t.StripeOf(key);
    absl::MutexLock l(&s.mu);
    Unlook(s, key);
    if (const uint32_t slot = s.rows.Find(key); slot != SparseTable::kNoRow) {
      s.rows.Remove(key, slot);
    }
  }
  std::string bytes(t.row_bytes_, '\0');
  RowHead head{key, meta.last_step,
               static_cast<uint32_t>(
                   std::clamp<int64_t>(meta.updates, 0, int64_t{UINT32_MAX}))};
  std::memcpy(bytes.data(), &head, sizeof(head));
  t.codec_.EncodeNearest(row.data(), t.row_floats_,
                         bytes.data() + sizeof(RowHead));
  absl::MutexLock l(&t.disk_mu_);
  if (t.restoring_ == nullptr) {
    t.restoring_ = std::make_unique<RowStore::Batch>();
  }
  t.restoring_->Put(key, bytes);
  return Flush(t, /*all=*/false);
}

absl::Status SparseTableDisk::DropRow(SparseTable& t, uint64_t key) {
  absl::MutexLock l(&t.disk_mu_);
  if (t.restoring_ == nullptr) {
    t.restoring_ = std::make_unique<RowStore::Batch>();
  }
  t.restoring_->Delete(key);
  return Flush(t, /*all=*/false);
}

absl::Status SparseTableDisk::FinishRestore(SparseTable& t) {
  absl::MutexLock l(&t.disk_mu_);
  return Flush(t, /*all=*/true);
}

void SparseTableDisk::Clear(SparseTable& t) {
  {
    absl::MutexLock l(&t.disk_mu_);
    t.restoring_.reset();
  }
  if (absl::Status st = t.store_->Clear(); !st.ok()) {
    LOG(ERROR) << "sparse table: emptying the disk tier: " << st;
  }
}

}  // namespace shardps
