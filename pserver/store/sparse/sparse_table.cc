#include "pserver/store/sparse/sparse_table.h"

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

// The admission counters a table keeps in all (admission_max_keys, or an
// eighth of its memory share); 0 without admission.
int64_t AdmissionKeys(const SparseTableOptions& o, int64_t memory_share) {
  if (o.admit_after() <= 1) return 0;
  if (o.admission_max_keys() > 0) return o.admission_max_keys();
  if (memory_share <= 0) return int64_t{1} << 20;
  return std::max<int64_t>(65536,
                           memory_share / 8 / SightingTable::kEntryBytes);
}

// The rows, with their index, that `bytes` hold: the index's size steps
// by powers of two, so the best count is the largest that fits under one
// of its sizes.
int64_t RowsFitting(int64_t bytes, int row_bytes) {
  constexpr int64_t kEntry = RowIndex::kEntryBytes;
  int64_t best = 0;
  for (int64_t cap = RowIndex::kMinCapacity; cap * kEntry <= bytes; cap *= 2) {
    const int64_t rows =
        std::min((bytes - cap * kEntry) / row_bytes, cap * 3 / 4);
    if (static_cast<int64_t>(RowIndex::BytesFor(static_cast<size_t>(rows))) +
            rows * row_bytes <=
        bytes) {
      best = std::max(best, rows);
    }
  }
  return best;
}

// The bytes of the share left for rows once the admission counters are
// paid for.
int64_t RowBytesInShare(int64_t memory_share, int64_t admission_keys) {
  return std::max<int64_t>(
      0, memory_share - admission_keys * SightingTable::kEntryBytes);
}

// The bits a row's stochastic rounding draws from at its update number
// `updates`: the same on every run and every replica.
uint64_t RoundingSeed(uint64_t key, uint32_t updates) {
  return Mix64(key ^ Mix64(updates + 0x632BE59BD9B4E019ULL));
}

// A per-thread buffer of at least n floats.
float* Scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// The rows a stripe may hold: what its part of the share holds with their
// index (at least one); 0 without a share.
int64_t MaxRowsPerStripe(int64_t memory_share, int64_t admission_keys,
                         int row_bytes, int stripes) {
  if (memory_share <= 0) return 0;
  const int64_t rows = std::max<int64_t>(
      1, RowsFitting(RowBytesInShare(memory_share, admission_keys) / stripes,
                     row_bytes));
  // Whole chunks, so that what is reserved stays within the share.
  const int64_t chunk = std::clamp<int64_t>(
      SparseTable::kChunkBytes / row_bytes, 1, SparseTable::kMaxRowsPerChunk);
  return rows >= chunk ? rows / chunk * chunk : rows;
}

// `requested` stripes, or fewer when the share holds fewer than
// kMinRowsPerStripe rows a stripe: a row's stripe must have room for it.
int StripesFor(int64_t memory_share, int64_t admission_keys, int row_bytes,
               int requested) {
  requested = std::max(1, requested);
  if (memory_share <= 0) return requested;
  const int64_t rows =
      RowsFitting(RowBytesInShare(memory_share, admission_keys), row_bytes);
  return static_cast<int>(
      std::clamp<int64_t>(rows / SparseTable::kMinRowsPerStripe, 1, requested));
}

// A disk tier's cache evicts by LFU unless the table says otherwise.
SparseTableOptions WithDiskDefaults(SparseTableOptions o) {
  if (o.has_disk() && !o.has_eviction()) {
    o.mutable_eviction()->set_policy(EvictionOptions::LFU);
  }
  return o;
}

}  // namespace

SparseTable::SparseTable(const SparseTableOptions& options,
                         const Optimizer* optimizer, int num_stripes,
                         MemoryBudget* budget, int64_t memory_share,
                         const Clock* clock, std::unique_ptr<RowStore> store)
    : dim_(options.dim()),
      row_floats_(options.dim() + optimizer->StateFloats(options.dim())),
      codec_(options.storage_type()),
      row_bytes_(RowSlab::RowBytes(row_floats_, codec_)),
      num_stripes_(StripesFor(memory_share,
                              AdmissionKeys(options, memory_share), row_bytes_,
                              num_stripes)),
      sightings_per_stripe_(AdmissionKeys(options, memory_share) /
                            num_stripes_),
      max_rows_per_stripe_(
          MaxRowsPerStripe(memory_share, sightings_per_stripe_ * num_stripes_,
                           row_bytes_, num_stripes_)),
      rows_per_chunk_(static_cast<int>(std::clamp<int64_t>(
          kChunkBytes / row_bytes_, 1,
          max_rows_per_stripe_ > 0
              ? std::min<int64_t>(kMaxRowsPerChunk, max_rows_per_stripe_)
              : kMaxRowsPerChunk))),
      budget_(budget),
      options_(WithDiskDefaults(options)),
      optimizer_(optimizer),
      policy_(options_),
      clock_(clock != nullptr ? clock : Clock::Real()),
      stripes_(),
      store_(std::move(store)) {
  // Counted whatever the limit: the job's share was checked for it.
  if (store_ != nullptr && budget_ != nullptr) {
    budget_->Add(store_->MemoryBytes());
  }
  for (int i = 0; i < num_stripes_; ++i) {
    stripes_.emplace_back(row_floats_, codec_, rows_per_chunk_);
  }
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    s.sightings.Reset(sightings_per_stripe_);
  }
}

SparseTable::~SparseTable() {
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    ClearStripe(s);
  }
  if (store_ != nullptr) {
    {
      absl::MutexLock l(&disk_mu_);
      store_save_snapshot_.reset();  // before the store closes
      restoring_.reset();
    }
    if (budget_ != nullptr) budget_->Release(store_->MemoryBytes());
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

SparseTable::RowMeta SparseTable::MetaOf(const Stripe& s, uint32_t slot) const {
  const RowHead* h = s.rows.Head(slot);
  return RowMeta{h->key, h->last_step, int64_t{h->updates}};
}

void SparseTable::SetMeta(Stripe& s, uint32_t slot, const RowMeta& meta) const {
  RowHead* h = s.rows.Head(slot);
  h->key = meta.key;
  h->last_step = meta.last_step;
  h->updates = static_cast<uint32_t>(
      std::clamp<int64_t>(meta.updates, 0, int64_t{UINT32_MAX}));
}

void SparseTable::InitialRow(uint64_t key, float* out) const {
  InitialSparseRow(options_.init(), dim_, key, out);
}

bool SparseTable::ReserveRow(Stripe& s) {
  // A chunk and the index's growth are reserved before they are made. Rows
  // stop short of the limit, leaving room for a step's sums.
  if (const int64_t bytes = s.rows.BytesToAdd(); bytes > 0) {
    if (budget_ != nullptr &&
        !budget_->TryReserve(bytes, budget_->headroom())) {
      return false;
    }
    s.reserved += bytes;
  }
  return true;
}

uint32_t SparseTable::NewRow(Stripe& s, uint64_t key) {
  if (!ReserveRow(s)) return kNoRow;
  const uint32_t slot = s.rows.Add(key);
  float* row = Scratch(row_floats_);
  InitialRow(key, row);
  std::fill(row + dim_, row + row_floats_, optimizer_->initial_slot_value());
  s.rows.SetFloats(slot, row);
  Stamp(s, slot, NowSeconds());
  ++s.created;
  return slot;
}

int64_t SparseTable::NowSeconds() const {
  return absl::ToUnixSeconds(clock_->Now()) - kClockEpoch;
}

RowUse SparseTable::UseOf(const Stripe& s, uint32_t slot) const {
  const RowHead* h = s.rows.Head(slot);
  return RowUse{h->last_step, int64_t{h->updates},
                policy_.uses_clock() ? int64_t{s.seconds[slot]} : 0};
}

void SparseTable::Stamp(Stripe& s, uint32_t slot, int64_t now_seconds) const {
  if (!policy_.uses_clock()) return;
  if (s.seconds.size() <= slot) s.seconds.resize(s.rows.slots_used());
  s.seconds[slot] =
      static_cast<uint32_t>(std::clamp<int64_t>(now_seconds, 0, UINT32_MAX));
}

SparseTable::ApplyContext SparseTable::MakeContext(int64_t step) const {
  ApplyContext c;
  c.step = step;
  c.now_seconds = NowSeconds();
  c.slots.resize(optimizer_->num_slots());
  if (!codec_.is_float32()) c.row.resize(row_floats_);
  return c;
}

void SparseTable::Read(absl::Span<const uint64_t> keys, float* out) const {
  std::vector<uint32_t> order, begin;
  GroupByStripe(keys, &order, &begin);
  uint64_t batch_keys[kLookupBatch];
  uint32_t slots[kLookupBatch];
  // The disk tier: keys not in memory, read from disk at the end, and the
  // stripes' spill counts then.
  std::vector<uint32_t> misses;
  std::vector<int64_t> spills(store_ != nullptr ? stripes_.size() : 0);
  for (size_t i = 0; i < stripes_.size(); ++i) {
    const Stripe& s = stripes_[i];
    if (begin[i] == begin[i + 1]) continue;
    absl::MutexLock l(&s.mu);
    if (!spills.empty()) spills[i] = s.spilled;
    for (uint32_t b = begin[i]; b < begin[i + 1]; b += kLookupBatch) {
      const size_t n = std::min<size_t>(kLookupBatch, begin[i + 1] - b);
      for (size_t j = 0; j < n; ++j) batch_keys[j] = keys[order[b + j]];
      s.rows.FindBatch(absl::MakeConstSpan(batch_keys, n),
                       sizeof(RowHead) +
                           static_cast<size_t>(codec_.bytes_per_float()) * dim_,
                       slots);
      for (size_t j = 0; j < n; ++j) {
        float* dst = out + static_cast<size_t>(order[b + j]) * dim_;
        if (slots[j] != kNoRow) {
          codec_.Decode(s.rows.Payload(slots[j]), dim_, dst);
          continue;
        }
        auto it = s.looked.find(batch_keys[j]);  // empty without a disk tier
        if (store_ != nullptr && it == s.looked.end()) {
          misses.push_back(order[b + j]);
        } else if (it != s.looked.end() && !it->second.empty()) {
          codec_.Decode(it->second.data() + sizeof(RowHead), dim_, dst);
        } else {
          InitialRow(batch_keys[j], dst);
        }
      }
    }
  }
  // Outside the stripes' locks: a row that left memory since was written
  // to disk first.
  if (store_ != nullptr) {
    SparseTableDisk::ReadMisses(*this, keys, misses, out, spills);
  }
}

void SparseTable::RemoveRow(Stripe& s, uint64_t key, uint32_t slot) {
  Changed(s, key);
  s.rows.Remove(key, slot);
}

void SparseTable::UpdateRow(Stripe& s, uint32_t slot, const float* grad,
                            float scale, ApplyContext* c) {
  RowHead* head = s.rows.Head(slot);
  float* row = static_cast<float*>(s.rows.Payload(slot));
  if (!codec_.is_float32()) {
    row = c->row.data();
    codec_.Decode(s.rows.Payload(slot), row_floats_, row);
  }
  float* state = row + dim_;
  for (size_t k = 0; k < c->slots.size(); ++k) {
    const int width = optimizer_->SlotWidth(static_cast<int>(k), dim_);
    c->slots[k] = absl::MakeSpan(state, width);
    state += width;
  }
  const uint32_t updates = head->updates;
  if (!optimizer_->ApplyIfFinite(c->step, updates, scale,
                                 absl::MakeConstSpan(grad, dim_),
                                 absl::MakeSpan(row, dim_), c->slots)) {
    ++s.non_finite;
    LOG_EVERY_T(WARNING, 10)
        << "sparse table: the update of a row at step " << c->step
        << " would make it infinite or NaN (a huge gradient or learning "
           "rate); not applied (shardps_pserver_non_finite_updates_total "
           "counts them)";
    return;
  }
  const uint64_t key = head->key;
  if (!codec_.is_float32()) {
    codec_.EncodeStochastic(row, row_floats_, RoundingSeed(key, updates),
                            s.rows.Payload(slot));
  }
  if (updates != UINT32_MAX) head->updates = updates + 1;
  head->last_step = c->step;
  Stamp(s, slot, c->now_seconds);
  Changed(s, key);
}

void SparseTable::Apply(int64_t step, absl::Span<const uint64_t> keys,
                        absl::Span<const float> grads,
                        absl::Span<const float> scales,
                        std::vector<uint64_t>* evicted_full,
                        bool evict_when_full) {
  ApplyContext c = MakeContext(step);
  c.evict_when_full = evict_when_full;
  c.evicted_full = evicted_full;
  std::vector<uint32_t> order, begin;
  GroupByStripe(keys, &order, &begin);
  uint64_t batch_keys[kLookupBatch];
  uint32_t rows[kLookupBatch];
  std::vector<NewKey> fresh;
  for (size_t i = 0; i < stripes_.size(); ++i) {
    Stripe& s = stripes_[i];
    if (begin[i] == begin[i + 1]) continue;
    absl::MutexLock l(&s.mu);
    SparseTableBlob::SaveIfPending(*this, s);
    fresh.clear();
    for (uint32_t b = begin[i]; b < begin[i + 1]; b += kLookupBatch) {
      const size_t n = std::min<size_t>(kLookupBatch, begin[i + 1] - b);
      for (size_t j = 0; j < n; ++j) batch_keys[j] = keys[order[b + j]];
      s.rows.FindBatch(absl::MakeConstSpan(batch_keys, n), row_bytes_, rows);
      for (size_t j = 0; j < n; ++j) {
        const size_t k = order[b + j];
        const float* g = grads.data() + k * dim_;
        const float scale = scales.size() == 1 ? scales[0] : scales[k];
        if (rows[j] != kNoRow) {
          UpdateRow(s, rows[j], g, scale, &c);
        } else {
          fresh.push_back({batch_keys[j], g, scale});
        }
      }
    }
    SparseNewRows::Add(*this, s, &fresh, &c);
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
  ApplyContext c = MakeContext(step);
  if (applied != nullptr) c.evicted_full = &applied->evicted_full;
  uint32_t rows[kLookupBatch];
  std::vector<NewKey> fresh;
  int64_t n = 0;
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    const size_t keys = s.accum_keys.size();
    if (keys > 0) SparseTableBlob::SaveIfPending(*this, s);
    fresh.clear();
    for (size_t b = 0; b < keys; b += kLookupBatch) {
      const size_t m = std::min(kLookupBatch, keys - b);
      s.rows.FindBatch(absl::MakeConstSpan(s.accum_keys.data() + b, m),
                       row_bytes_, rows);
      for (size_t j = 0; j < m; ++j) {
        const float* sum = s.accum_sums.data() + (b + j) * dim_;
        const float scale =
            per_step ? step_scale : 1.0f / s.accum_counts[b + j];
        if (rows[j] != kNoRow) {
          UpdateRow(s, rows[j], sum, scale, &c);
        } else {
          fresh.push_back({s.accum_keys[b + j], sum, scale});
        }
      }
    }
    SparseNewRows::Add(*this, s, &fresh, &c);
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
  SparseTableBlob::SaveIfPending(*this, s);
  ClearAccumulators(s);
  if (budget_ != nullptr) budget_->Release(s.reserved);
  s.reserved = 0;
  s.rows.Clear();
  s.seconds.clear();
  s.sightings.Clear();
  s.changed.clear();
  s.pending_snapshot.reset();
  s.looked.clear();
  s.looked_bytes = 0;
}

void SparseTable::ClearStripes() {
  for (Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    ClearStripe(s);
  }
  if (store_ != nullptr) SparseTableDisk::Clear(*this);
}

SparseCounters SparseTable::counters() const {
  SparseCounters c;
  for (const Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    c.rows += static_cast<int64_t>(s.rows.size());
    c.pending_keys += s.sightings.size();
    c.created += s.created;
    c.evicted_full += s.evicted_full;
    c.expired += s.expired;
    c.dropped_updates += s.dropped;
    c.refused_rows += s.refused;
    c.non_finite_updates += s.non_finite;
    c.spilled_rows += s.spilled;
    c.loaded_rows += s.loaded;
    c.disk_errors += s.disk_errors;
  }
  if (store_ != nullptr) {
    c.on_disk = true;
    c.disk_rows = store_->EstimatedRows();
    c.disk_errors += read_errors_.load();
  }
  c.evicted = c.evicted_full + c.expired;
  c.max_rows = max_rows_per_stripe_ * static_cast<int64_t>(stripes_.size());
  return c;
}

size_t SparseTable::MemoryBytes() const {
  size_t bytes = 0;
  for (const Stripe& s : stripes_) {
    absl::MutexLock l(&s.mu);
    bytes += s.rows.Bytes();
    if (s.sightings.allocated()) bytes += s.sightings.Bytes();
    bytes += s.seconds.capacity() * sizeof(uint32_t);
    bytes +=
        s.accum_index.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1) +
        s.accum_keys.capacity() * sizeof(uint64_t) +
        s.accum_sums.capacity() * sizeof(float) +
        s.accum_counts.capacity() * sizeof(int32_t);
  }
  if (store_ != nullptr) {
    bytes += static_cast<size_t>(store_->MemoryBytes() + store_->ReaderBytes());
  }
  return bytes;
}

}  // namespace shardps
