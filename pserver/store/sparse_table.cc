#include "pserver/store/sparse_table.h"

#include <algorithm>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/model_export/initial_row.h"
#include "common/placement/shard_map.h"
#include "common/storage/blob_io.h"
#include "glog/logging.h"

namespace shardps {
namespace {

// Keys are looked up this many at a time: their rows, prefetched, stay in
// the cache until they are used.
constexpr size_t kLookupBatch = 256;

}  // namespace

SparseTable::SparseTable(const SparseTableOptions& options,
                         const Optimizer* optimizer, int num_stripes,
                         MemoryBudget* budget)
    : dim_(options.dim()),
      row_floats_(options.dim() * (1 + optimizer->num_slots())),
      rows_per_chunk_(static_cast<int>(std::clamp<int64_t>(
          kChunkBytes / (int64_t{row_floats_} * sizeof(float)), 1,
          kMaxRowsPerChunk))),
      budget_(budget),
      options_(options),
      optimizer_(optimizer),
      stripes_(std::max(1, num_stripes)) {}

SparseTable::~SparseTable() {
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    ClearStripe(s);
  }
}

size_t SparseTable::StripeIndex(uint64_t key) const {
  // The high bits: the low bits of Mix64 chose the pserver.
  return (Mix64(key) >> 40) % stripes_.size();
}

SparseTable::Stripe& SparseTable::StripeOf(uint64_t key) const {
  return stripes_[StripeIndex(key)];
}

void SparseTable::GroupByStripe(absl::Span<const uint64_t> keys,
                                std::vector<uint32_t>* order,
                                std::vector<uint32_t>* begin) const {
  // A counting sort, stable: a stripe's keys keep their order.
  std::vector<uint32_t> stripe(keys.size());
  begin->assign(stripes_.size() + 1, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    stripe[i] = static_cast<uint32_t>(StripeIndex(keys[i]));
    ++(*begin)[stripe[i] + 1];
  }
  for (size_t i = 1; i < begin->size(); ++i) (*begin)[i] += (*begin)[i - 1];
  std::vector<uint32_t> next(begin->begin(), begin->end() - 1);
  order->resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    (*order)[next[stripe[i]]++] = static_cast<uint32_t>(i);
  }
}

void SparseTable::FindRows(const Stripe& s, absl::Span<const uint64_t> keys,
                           size_t row_bytes, uint32_t* slots) const {
  constexpr size_t kAhead = 16;
  const size_t n = keys.size();
  for (size_t j = 0; j < std::min(n, kAhead); ++j) s.index.prefetch(keys[j]);
  for (size_t j = 0; j < n; ++j) {
    if (j + kAhead < n) s.index.prefetch(keys[j + kAhead]);
    auto it = s.index.find(keys[j]);
    if (it == s.index.end()) {
      slots[j] = kNoRow;
      continue;
    }
    slots[j] = it->second;
    const char* row = reinterpret_cast<const char*>(RowPtr(s, it->second));
    for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + b);
  }
}

float* SparseTable::RowPtr(const Stripe& s, uint32_t slot) const {
  return s.chunks[slot / rows_per_chunk_].get() +
         static_cast<size_t>(slot % rows_per_chunk_) * row_floats_;
}

void SparseTable::InitialRow(uint64_t key, float* out) const {
  InitialSparseRow(options_.init(), dim_, key, out);
}

uint32_t SparseTable::NewRow(Stripe& s, uint64_t key) {
  uint32_t slot;
  if (!s.free_slots.empty()) {
    slot = s.free_slots.back();
    s.free_slots.pop_back();
  } else {
    slot = static_cast<uint32_t>(s.meta.size());
    if (slot % rows_per_chunk_ == 0) {
      const int64_t bytes =
          int64_t{rows_per_chunk_} * row_floats_ * sizeof(float);
      // Rows stop short of the limit, leaving room for a step's sums.
      if (budget_ != nullptr &&
          !budget_->TryReserve(bytes, budget_->headroom())) {
        return kNoRow;
      }
      s.reserved += bytes;
      s.chunks.emplace_back(
          new float[static_cast<size_t>(rows_per_chunk_) * row_floats_]);
    }
    s.meta.emplace_back();
  }
  float* row = RowPtr(s, slot);
  InitialRow(key, row);
  std::fill(row + dim_, row + row_floats_, optimizer_->initial_slot_value());
  s.meta[slot] = RowMeta{key, 0, 0};
  s.index.emplace(key, slot);
  ++s.created;
  return slot;
}

void SparseTable::Read(absl::Span<const uint64_t> keys, float* out) const {
  std::vector<uint32_t> order, begin;
  GroupByStripe(keys, &order, &begin);
  uint64_t batch_keys[kLookupBatch];
  uint32_t slots[kLookupBatch];
  for (size_t i = 0; i < stripes_.size(); ++i) {
    const Stripe& s = stripes_[i];
    if (begin[i] == begin[i + 1]) continue;
    absl::MutexLock l(&s.mu);
    for (uint32_t b = begin[i]; b < begin[i + 1]; b += kLookupBatch) {
      const size_t n = std::min<size_t>(kLookupBatch, begin[i + 1] - b);
      for (size_t j = 0; j < n; ++j) batch_keys[j] = keys[order[b + j]];
      FindRows(s, absl::MakeConstSpan(batch_keys, n), sizeof(float) * dim_,
               slots);
      for (size_t j = 0; j < n; ++j) {
        float* dst = out + static_cast<size_t>(order[b + j]) * dim_;
        if (slots[j] == kNoRow) {
          InitialRow(batch_keys[j], dst);
        } else {
          std::memcpy(dst, RowPtr(s, slots[j]), sizeof(float) * dim_);
        }
      }
    }
  }
}

void SparseTable::ApplyOne(Stripe& s, int64_t step, uint64_t key,
                           const float* grad, float scale, bool maybe_added,
                           std::vector<absl::Span<float>>* slots) {
  auto it = maybe_added ? s.index.find(key) : s.index.end();
  uint32_t slot;
  if (it != s.index.end()) {
    slot = it->second;
  } else {
    const int64_t admit_after = std::max<int64_t>(1, options_.admit_after());
    if (admit_after > 1) {
      Changed(s, key);
      Sighting& seen = s.sightings[key];
      seen.last_step = step;
      if (++seen.count < admit_after) {
        ++s.dropped;
        return;
      }
      s.sightings.erase(key);
    }
    slot = NewRow(s, key);
    Changed(s, key);  // a row now, whatever its first update does
    if (slot == kNoRow) {
      ++s.refused;
      LOG_EVERY_T(WARNING, 60)
          << "sparse table: a new row needs memory past --max_memory_mb="
          << (budget_->limit() >> 20) << " (less an eighth kept for step "
          << "sums); new rows are refused and their updates dropped, "
          << "existing rows go on training";
      return;
    }
  }
  UpdateRow(s, slot, step, grad, scale, slots);
}

void SparseTable::UpdateRow(Stripe& s, uint32_t slot, int64_t step,
                            const float* grad, float scale,
                            std::vector<absl::Span<float>>* slots) {
  float* row = RowPtr(s, slot);
  for (size_t k = 0; k < slots->size(); ++k) {
    (*slots)[k] = absl::MakeSpan(row + dim_ * (1 + k), dim_);
  }
  RowMeta& meta = s.meta[slot];
  if (!optimizer_->ApplyIfFinite(step, meta.updates, scale,
                                 absl::MakeConstSpan(grad, dim_),
                                 absl::MakeSpan(row, dim_), *slots)) {
    ++s.non_finite;
    LOG_EVERY_T(WARNING, 10)
        << "sparse table: the update of a row at step " << step
        << " would make it infinite or NaN (a huge gradient or learning "
           "rate); not applied (shardps_pserver_non_finite_updates_total "
           "counts them)";
    return;
  }
  ++meta.updates;
  meta.last_step = step;
  Changed(s, meta.key);
}

void SparseTable::Apply(int64_t step, absl::Span<const uint64_t> keys,
                        absl::Span<const float> grads,
                        absl::Span<const float> scales) {
  std::vector<absl::Span<float>> slots(optimizer_->num_slots());
  std::vector<uint32_t> order, begin;
  GroupByStripe(keys, &order, &begin);
  uint64_t batch_keys[kLookupBatch];
  uint32_t rows[kLookupBatch];
  for (size_t i = 0; i < stripes_.size(); ++i) {
    Stripe& s = stripes_[i];
    if (begin[i] == begin[i + 1]) continue;
    absl::MutexLock l(&s.mu);
    SaveIfPending(s);
    for (uint32_t b = begin[i]; b < begin[i + 1]; b += kLookupBatch) {
      const size_t n = std::min<size_t>(kLookupBatch, begin[i + 1] - b);
      for (size_t j = 0; j < n; ++j) batch_keys[j] = keys[order[b + j]];
      FindRows(s, absl::MakeConstSpan(batch_keys, n),
               sizeof(float) * row_floats_, rows);
      for (size_t j = 0; j < n; ++j) {
        const size_t k = order[b + j];
        const float* g = grads.data() + k * dim_;
        const float scale = scales.size() == 1 ? scales[0] : scales[k];
        if (rows[j] != kNoRow) {
          UpdateRow(s, rows[j], step, g, scale, &slots);
        } else {
          ApplyOne(s, step, batch_keys[j], g, scale, /*maybe_added=*/true,
                   &slots);
        }
      }
    }
  }
}

void SparseTable::Accumulate(absl::Span<const uint64_t> keys,
                             absl::Span<const float> grads) {
  std::vector<uint32_t> order, begin;
  GroupByStripe(keys, &order, &begin);
  const int64_t new_key_bytes = int64_t{dim_} * sizeof(float) + 32;
  for (size_t i = 0; i < stripes_.size(); ++i) {
    Stripe& s = stripes_[i];
    if (begin[i] == begin[i + 1]) continue;
    absl::MutexLock l(&s.mu);
    for (uint32_t p = begin[i]; p < begin[i + 1]; ++p) {
      const size_t k = order[p];
      const float* g = grads.data() + k * dim_;
      auto [it, inserted] = s.accum_index.try_emplace(
          keys[k], static_cast<uint32_t>(s.accum_keys.size()));
      if (inserted) {
        // Counted whatever the limit: a push is checked against the budget
        // before it is accumulated.
        if (budget_ != nullptr) budget_->Add(new_key_bytes);
        s.reserved += new_key_bytes;
        s.accum_keys.push_back(keys[k]);
        s.accum_sums.insert(s.accum_sums.end(), g, g + dim_);
        s.accum_counts.push_back(1);
      } else {
        float* sum =
            s.accum_sums.data() + static_cast<size_t>(it->second) * dim_;
        for (int j = 0; j < dim_; ++j) sum[j] += g[j];
        ++s.accum_counts[it->second];
      }
    }
  }
}

int64_t SparseTable::ApplyAccumulated(int64_t step, int step_trainers,
                                      AppliedUpdate* applied) {
  const bool per_step =
      options_.gradient_mean() == SparseTableOptions::STEP_TRAINERS &&
      step_trainers > 0;
  const float step_scale = per_step ? 1.0f / step_trainers : 0.0f;
  std::vector<absl::Span<float>> slots(optimizer_->num_slots());
  uint32_t rows[kLookupBatch];
  int64_t n = 0;
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    const size_t keys = s.accum_keys.size();
    if (keys > 0) SaveIfPending(s);
    for (size_t b = 0; b < keys; b += kLookupBatch) {
      const size_t m = std::min(kLookupBatch, keys - b);
      FindRows(s, absl::MakeConstSpan(s.accum_keys.data() + b, m),
               sizeof(float) * row_floats_, rows);
      for (size_t j = 0; j < m; ++j) {
        const float* sum = s.accum_sums.data() + (b + j) * dim_;
        const float scale =
            per_step ? step_scale : 1.0f / s.accum_counts[b + j];
        if (rows[j] != kNoRow) {
          UpdateRow(s, rows[j], step, sum, scale, &slots);
        } else {
          ApplyOne(s, step, s.accum_keys[b + j], sum, scale,
                   /*maybe_added=*/false, &slots);
        }
      }
    }
    n += static_cast<int64_t>(keys);
    if (applied != nullptr) {
      applied->keys.insert(applied->keys.end(), s.accum_keys.begin(),
                           s.accum_keys.end());
      applied->grad.insert(applied->grad.end(), s.accum_sums.begin(),
                           s.accum_sums.begin() + keys * dim_);
      for (size_t j = 0; j < keys; ++j) {
        applied->scales.push_back(per_step ? step_scale
                                           : 1.0f / s.accum_counts[j]);
      }
    }
    ClearAccumulators(s);
  }
  return n;
}

int64_t SparseTable::Evict(int64_t current_step) {
  const int64_t after = options_.evict_after_steps();
  if (after <= 0) return 0;
  const int64_t oldest = current_step - after;
  int64_t removed = 0;
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    SaveIfPending(s);
    for (auto it = s.index.begin(); it != s.index.end();) {
      auto cur = it++;
      if (s.meta[cur->second].last_step < oldest) {
        Changed(s, cur->first);
        s.free_slots.push_back(cur->second);
        s.index.erase(cur);
        ++removed;
        ++s.evicted;
      }
    }
    for (auto it = s.sightings.begin(); it != s.sightings.end();) {
      auto cur = it++;
      if (cur->second.last_step < oldest) {
        Changed(s, cur->first);
        s.sightings.erase(cur);
      }
    }
  }
  return removed;
}

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

void SparseTable::ClearAccumulators(Stripe& s) {
  const int64_t bytes =
      static_cast<int64_t>(s.accum_keys.size()) * (dim_ * sizeof(float) + 32);
  if (budget_ != nullptr) budget_->Release(bytes);
  s.reserved -= bytes;
  s.accum_index.clear();
  s.accum_keys.clear();
  s.accum_sums.clear();
  s.accum_counts.clear();
}

void SparseTable::ClearStripe(Stripe& s) {
  SaveIfPending(s);
  ClearAccumulators(s);
  if (budget_ != nullptr) budget_->Release(s.reserved);
  s.reserved = 0;
  s.index.clear();
  s.chunks.clear();
  s.meta.clear();
  s.free_slots.clear();
  s.sightings.clear();
  s.changed.clear();
}

void SparseTable::ClearStripes() {
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    ClearStripe(s);
  }
}

std::string SparseTable::SaveHeader(int copies) const {
  std::string out;
  AppendPod(&out, kSparseMagic);
  AppendPod<int32_t>(&out, dim_);
  AppendPod<int32_t>(&out, row_floats_);
  AppendPod<uint64_t>(&out, stripes_.size() * copies);
  return out;
}

void SparseTable::AppendGroup(const Stripe& s, std::string* out) const {
  AppendPod<uint64_t>(out, s.index.size());
  for (const auto& [key, slot] : s.index) {
    const RowMeta& m = s.meta[slot];
    AppendPod(out, key);
    AppendPod(out, m.last_step);
    AppendPod(out, m.updates);
    AppendFloats(out, RowPtr(s, slot), row_floats_);
  }
  AppendPod<uint64_t>(out, s.sightings.size());
  for (const auto& [key, seen] : s.sightings) {
    AppendPod(out, key);
    AppendPod(out, seen.count);
    AppendPod(out, seen.last_step);
  }
}

void SparseTable::Serialize(std::string* out) const {
  out->append(SaveHeader());
  for (const Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    AppendGroup(s, out);
  }
}

void SparseTable::MarkForSave(SaveSink* sink, uint32_t table_id, bool delta) {
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    s.pending_save = sink;
    s.pending_table = table_id;
    s.pending_delta = delta;
  }
}

void SparseTable::SaveIfPending(Stripe& s) const {
  if (s.pending_save == nullptr) return;
  std::string group;
  if (s.pending_delta) {
    SparseDeltas::AppendGroup(*this, s, &group);
  } else {
    group.reserve(16 + s.index.size() * (24 + sizeof(float) * row_floats_) +
                  s.sightings.size() * 24);
    AppendGroup(s, &group);
  }
  // Every save, whole or not, is the base of the next delta.
  s.changed.clear();
  s.pending_save->Append(s.pending_table, group);
  s.pending_save = nullptr;
}

void SparseTable::SaveRemaining() {
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    SaveIfPending(s);
  }
}

absl::Status SparseTable::RestoreRow(uint64_t key, RowMeta meta,
                                     absl::Span<const float> row) {
  Stripe& s = StripeOf(key);
  absl::MutexLock l(&s.mu);
  if (s.index.contains(key)) return absl::DataLossError("a key appears twice");
  const uint32_t slot = NewRow(s, key);
  if (slot == kNoRow) {
    return absl::ResourceExhaustedError(
        "its rows need more than --max_memory_mb allows");
  }
  --s.created;  // restored, not created
  std::memcpy(RowPtr(s, slot), row.data(), sizeof(float) * row.size());
  meta.key = key;
  s.meta[slot] = meta;
  return absl::OkStatus();
}

absl::Status SparseTable::Deserialize(absl::string_view data,
                                      const KeyFilter& keep) {
  ClearStripes();
  BlobReader r(data);
  absl::StatusOr<uint64_t> groups = ReadSparseHeader(r, dim_, row_floats_);
  if (!groups.ok()) return groups.status();
  std::vector<float> row(row_floats_);
  auto fail = [this](absl::string_view what,
                     absl::StatusCode code = absl::StatusCode::kDataLoss) {
    ClearStripes();
    return absl::Status(code, absl::StrCat("sparse table checkpoint: ", what));
  };
  // The stripe count may differ from the writer's: each row goes to the
  // stripe of its key here.
  for (uint64_t g = 0; g < *groups; ++g) {
    uint64_t rows = 0;
    if (!r.Get(&rows)) return fail("truncated row count");
    for (uint64_t i = 0; i < rows; ++i) {
      uint64_t key = 0;
      RowMeta m;
      if (!r.Get(&key) || !r.Get(&m.last_step) || !r.Get(&m.updates) ||
          !r.GetFloats(row.data(), row.size())) {
        return fail("truncated row");
      }
      if (keep && !keep(key)) continue;
      // Cleared outside the stripe's lock: ClearStripes takes it again.
      if (absl::Status st = RestoreRow(key, m, row); !st.ok()) {
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
      Stripe& s = StripeOf(key);
      absl::MutexLock l(&s.mu);
      s.sightings[key] = seen;
    }
  }
  if (!r.done()) return fail("trailing bytes");
  return absl::OkStatus();
}

SparseCounters SparseTable::counters() const {
  SparseCounters c;
  for (const Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    c.rows += static_cast<int64_t>(s.index.size());
    c.pending_keys += static_cast<int64_t>(s.sightings.size());
    c.created += s.created;
    c.evicted += s.evicted;
    c.dropped_updates += s.dropped;
    c.refused_rows += s.refused;
    c.non_finite_updates += s.non_finite;
  }
  return c;
}

size_t SparseTable::MemoryBytes() const {
  size_t bytes = 0;
  for (const Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    // A flat_hash_map slot is the pair plus one control byte.
    bytes += s.index.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1);
    bytes +=
        s.sightings.capacity() * (sizeof(std::pair<uint64_t, Sighting>) + 1);
    bytes += s.chunks.size() * sizeof(float) * rows_per_chunk_ * row_floats_;
    bytes += s.meta.capacity() * sizeof(RowMeta);
    bytes += s.free_slots.capacity() * sizeof(uint32_t);
    bytes +=
        s.accum_index.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1) +
        s.accum_keys.capacity() * sizeof(uint64_t) +
        s.accum_sums.capacity() * sizeof(float) +
        s.accum_counts.capacity() * sizeof(int32_t);
  }
  return bytes;
}

}  // namespace shardps
