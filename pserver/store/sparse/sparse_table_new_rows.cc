// SparseNewRows: a stripe's keys without a row in memory, of one Apply or
// ApplyAccumulated: admitted (or read back from the disk tier), given room
// by eviction, made, then updated.
#include <algorithm>
#include <string>
#include <vector>

#include "glog/logging.h"
#include "pserver/store/sparse/sparse_table.h"

namespace shardps {

void SparseNewRows::Add(SparseTable& t, SparseTable::Stripe& s,
                        std::vector<SparseTable::NewKey>* fresh,
                        SparseTable::ApplyContext* c) {
  if (fresh->empty()) return;
  std::stable_sort(fresh->begin(), fresh->end(),
                   [](const SparseTable::NewKey& a,
                      const SparseTable::NewKey& b) { return a.key < b.key; });
  std::vector<uint8_t> fate(fresh->size(), SparseTable::kDropped);
  std::vector<std::string> stored;
  const int64_t adding = Decide(t, s, *fresh, c, &fate, &stored);
  if (adding < 0) return;  // the disk cannot be read (counted)
  // Rows leave memory: dropped, or written to the disk tier.
  const bool evicts = t.store_ != nullptr ||
                      (c->evict_when_full && t.policy_.evicts_when_full());
  const int64_t max = t.max_rows_per_stripe_;
  const int64_t rows = static_cast<int64_t>(s.rows.size());
  if (evicts && max > 0 && rows + adding > max) {
    // Down to a sixteenth below the limit, so that the scan of the stripe
    // is not repeated for every new row.
    const int64_t target = max - std::max<int64_t>(1, max / 16);
    SparseTableEviction::EvictLowest(
        t, s, rows + adding - std::max<int64_t>(target, 0), c);
  }
  // The rows made or read back first, then their updates: rows read back
  // must leave the disk before they change.
  std::vector<uint32_t> slot(fresh->size(), SparseTable::kNoRow);
  Place(t, s, *fresh, fate, stored, evicts, c, &slot);
  for (size_t i = 0; i < fresh->size(); ++i) {
    if (fate[i] == SparseTable::kAgain) slot[i] = slot[i - 1];
    if (slot[i] == SparseTable::kNoRow) continue;
    const SparseTable::NewKey& k = (*fresh)[i];
    t.UpdateRow(s, slot[i], k.grad, k.scale, c);
  }
}

int64_t SparseNewRows::Decide(SparseTable& t, SparseTable::Stripe& s,
                              absl::Span<const SparseTable::NewKey> fresh,
                              SparseTable::ApplyContext* c,
                              std::vector<uint8_t>* fate,
                              std::vector<std::string>* stored) {
  // With the disk tier, rows on disk are read back, not created.
  if (t.store_ != nullptr &&
      !SparseTableDisk::Find(t, s, fresh, fate, stored)) {
    return -1;
  }
  int64_t adding = 0;
  for (size_t i = 0; i < fresh.size(); ++i) {
    const uint64_t key = fresh[i].key;
    if ((*fate)[i] == SparseTable::kLoad) {
      ++adding;
    } else if (i > 0 && fresh[i - 1].key == key &&
               (*fate)[i - 1] != SparseTable::kDropped) {
      (*fate)[i] = SparseTable::kAgain;
    } else if (SparseTableEviction::Admit(t, s, key, c->step)) {
      (*fate)[i] = SparseTable::kCreate;
      ++adding;
    }
  }
  return adding;
}

void SparseNewRows::Place(SparseTable& t, SparseTable::Stripe& s,
                          absl::Span<const SparseTable::NewKey> fresh,
                          absl::Span<const uint8_t> fate,
                          absl::Span<const std::string> stored, bool evicts,
                          SparseTable::ApplyContext* c,
                          std::vector<uint32_t>* slot) {
  std::vector<uint64_t> loaded_keys;
  std::vector<size_t> loaded_at;
  auto make = [&](size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
    return fate[i] == SparseTable::kLoad
               ? SparseTableDisk::Load(t, s, fresh[i].key, stored[i])
               : t.NewRow(s, fresh[i].key);
  };
  const int64_t max = t.max_rows_per_stripe_;
  for (size_t i = 0; i < fresh.size(); ++i) {
    if (fate[i] != SparseTable::kCreate && fate[i] != SparseTable::kLoad) {
      continue;
    }
    if (fate[i] == SparseTable::kLoad &&
        !SparseTableDisk::Usable(t, s, fresh[i].key, stored[i])) {
      continue;  // its later entries (kAgain) are dropped with it
    }
    t.Changed(s, fresh[i].key);  // a row now, or refused: either way a change
    const bool room = max <= 0 || static_cast<int64_t>(s.rows.size()) < max ||
                      (!c->evict_when_full && t.store_ == nullptr);
    uint32_t& got = (*slot)[i];
    got = room ? make(i) : SparseTable::kNoRow;
    if (got == SparseTable::kNoRow && evicts &&
        SparseTableEviction::EvictLowest(t, s, 1, c) == 1) {
      got = make(i);
    }
    if (got == SparseTable::kNoRow) {
      ++s.refused;
      LOG_EVERY_T(WARNING, 60)
          << "sparse table: no room for a new row (its stripe holds its "
             "share of --max_memory_mb, and every row there was updated "
             "in this step, or eviction is off, or the disk tier takes no "
             "writes); new rows are refused and their updates dropped, "
             "existing rows go on training";
      continue;
    }
    // Kept through the step's evictions, as an updated row is.
    s.rows.Head(got)->last_step = c->step;
    if (fate[i] == SparseTable::kLoad) {
      loaded_keys.push_back(fresh[i].key);
      loaded_at.push_back(i);
    }
  }
  if (loaded_keys.empty()) return;
  std::vector<uint32_t> loaded(loaded_at.size());
  for (size_t j = 0; j < loaded.size(); ++j) loaded[j] = (*slot)[loaded_at[j]];
  if (!SparseTableDisk::Forget(t, s, loaded_keys, absl::MakeSpan(loaded))) {
    for (size_t i : loaded_at) (*slot)[i] = SparseTable::kNoRow;
  }
}

}  // namespace shardps
