#include "pserver/checkpoint/row_export.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pserver/store/sparse/sparse_shard.h"

namespace shardps {

absl::StatusOr<uint64_t> SparseRowExport::Page(const SparseTable& table,
                                               uint64_t from, size_t max_rows,
                                               std::vector<uint64_t>* keys,
                                               std::vector<float>* values) {
  const int dim = table.dim_;
  size_t stripe = static_cast<size_t>(from >> 32);
  uint32_t slot = static_cast<uint32_t>(from);
  size_t n = 0;
  std::vector<float> scratch(dim);
  for (; stripe < table.stripes_.size(); ++stripe, slot = 0) {
    const SparseTable::Stripe& s = table.stripes_[stripe];
    absl::MutexLock l(&s.mu);
    for (; slot < s.rows.slots_used(); ++slot) {
      const uint64_t key = s.rows.Head(slot)->key;
      if (s.rows.Find(key) != slot) continue;  // free
      if (n == max_rows) return (uint64_t{stripe} << 32) | slot;
      const float* row = s.rows.Floats(slot, dim, scratch.data());
      keys->push_back(key);
      values->insert(values->end(), row, row + dim);
      ++n;
    }
  }
  if (table.store_ == nullptr) return kEnd;
  return DiskPage(table, stripe - table.stripes_.size(), slot, max_rows - n,
                  keys, values);
}

absl::StatusOr<uint64_t> SparseRowExport::DiskPage(const SparseTable& table,
                                                   size_t bucket, uint32_t skip,
                                                   size_t max_rows,
                                                   std::vector<uint64_t>* keys,
                                                   std::vector<float>* values) {
  const int dim = table.dim_;
  const size_t stripes = table.stripes_.size();
  auto snapshot = table.store_->TakeSnapshot();
  for (; bucket < RowStore::kBuckets; ++bucket, skip = 0) {
    uint32_t seen = 0;
    size_t taken = 0;
    bool full = false;
    absl::Status bad;
    const absl::Status st = table.store_->ForEachInBucket(
        static_cast<int>(bucket), *snapshot,
        [&](uint64_t key, absl::string_view bytes) {
          if (full || seen++ < skip) return;
          if (taken == max_rows) {
            full = true;
            return;
          }
          if (bytes.size() != static_cast<size_t>(table.row_bytes_)) {
            bad = absl::DataLossError(absl::StrCat("ExportRows: the row of ",
                                                   key, " on disk is ",
                                                   bytes.size(), " bytes"));
            return;
          }
          keys->push_back(key);
          values->resize(values->size() + dim);
          table.codec_.Decode(bytes.data() + sizeof(RowHead), dim,
                              values->data() + values->size() - dim);
          ++taken;
        });
    if (!st.ok()) return st;
    if (!bad.ok()) return bad;
    max_rows -= taken;
    if (full) {
      return (uint64_t{stripes + bucket} << 32) | (skip + taken);
    }
  }
  return kEnd;
}

absl::Status ExportRowsPage(ParameterStore* store, const ExportRowsRequest& req,
                            ExportRowsResponse* resp) {
  if (req.max_rows() < 1 || req.max_rows() > kMaxExportRows) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExportRows: max_rows must be in [1, ", kMaxExportRows,
                     "], got ", req.max_rows()));
  }
  const JobTables& tables = *store->state()->tables;
  std::vector<SparseShard*> shards;
  for (SparseShard* s : tables.sparse()) {
    if (s->table_id() == req.table_id()) shards.push_back(s);
  }
  if (shards.empty()) {
    // NOT_FOUND, or INVALID_ARGUMENT for a dense table, as a push names.
    return tables.FindSparse(req.table_id()).status();
  }
  // A cursor: the shard (its place among those held here) in the top 16
  // bits, then SparseRowExport's position.
  size_t shard = static_cast<size_t>(req.cursor() >> 48);
  uint64_t at = req.cursor() & ((uint64_t{1} << 48) - 1);
  if (shard >= shards.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExportRows: cursor ", req.cursor(), " names shard ",
                     shard, "; ", shards.size(), " held here"));
  }
  const int dim = shards[0]->rows().dim();
  const size_t max_rows = std::min<size_t>(
      req.max_rows(), std::max<size_t>(1, kMaxExportBytes / (4 * dim)));
  std::vector<uint64_t> keys;
  std::vector<float> values;
  resp->set_dim(dim);
  resp->set_next_cursor(0);
  for (; shard < shards.size(); ++shard, at = 0) {
    SparseShard* s = shards[shard];
    {
      absl::MutexLock l(&s->mu);
      if (s->barrier.version() < req.min_version()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "ExportRows: ", s->name(), " is at version ", s->barrier.version(),
            ", before ", req.min_version(), " (its last step is not applied)"));
      }
    }
    ASSIGN_OR_RETURN(
        const uint64_t next,
        SparseRowExport::Page(s->rows(), at, max_rows - keys.size(), &keys,
                              &values));
    if (next != SparseRowExport::kEnd) {
      resp->set_next_cursor((uint64_t{shard} << 48) | next);
      break;
    }
  }
  *resp->mutable_keys() = {keys.begin(), keys.end()};
  resp->set_values(reinterpret_cast<const char*>(values.data()),
                   values.size() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace shardps
