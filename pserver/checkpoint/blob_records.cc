#include "pserver/checkpoint/blob_records.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "common/storage/blob_io.h"

namespace shardps {
namespace {

constexpr uint32_t kDenseMagic = 0x44534e31;   // "DSN1"
constexpr uint32_t kSparseMagic = 0x53505432;  // "SPT2"

}  // namespace

int64_t NumValues(const TableSpec& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  return n;
}

absl::Status ForEachDenseRecord(
    absl::string_view name, absl::string_view blob, const TableSpec& table,
    const std::function<absl::Status(const DenseRecord&)>& f) {
  auto bad = [&name](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what));
  };
  BlobReader r(blob);
  uint32_t magic = 0, n = 0;
  if (!r.Get(&magic) || magic != kDenseMagic || !r.Get(&n)) {
    return bad("bad header");
  }
  const int64_t num_values = NumValues(table);
  const int64_t nb = NumBlocks(num_values, table.block_size());
  absl::string_view rest = blob.substr(8);
  for (uint32_t j = 0; j < n; ++j) {
    BlobReader head(rest);
    DenseRecord d;
    if (!head.Get(&d.index) || !head.Get(&d.version) || !head.Get(&d.size) ||
        !head.Get(&d.slots)) {
      return bad("truncated block");
    }
    if (d.index >= nb ||
        d.size != std::min(table.block_size(),
                           num_values - d.index * table.block_size())) {
      return bad(absl::StrCat("block ", d.index, " does not match the job's ",
                              "table ", table.name()));
    }
    const uint64_t bytes = 24 + uint64_t{4} * d.size * (1 + uint64_t{d.slots});
    if (d.slots > 16 || rest.size() < bytes) return bad("truncated block");
    d.raw = rest.substr(0, bytes);
    d.values = rest.data() + 24;
    RETURN_IF_ERROR(f(d));
    rest.remove_prefix(bytes);
  }
  if (!rest.empty()) return bad("trailing bytes");
  return absl::OkStatus();
}

absl::Status ForEachSparseRecord(
    absl::string_view name, absl::string_view blob,
    const std::function<absl::Status(int32_t dim, int32_t row_floats)>& header,
    const std::function<absl::Status(const SparseRecord&)>& row,
    const std::function<absl::Status(uint64_t key, absl::string_view raw)>&
        sighting) {
  auto bad = [&name](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what));
  };
  BlobReader r(blob);
  uint32_t magic = 0;
  int32_t dim = 0, row_floats = 0;
  uint64_t groups = 0;
  if (!r.Get(&magic) || magic != kSparseMagic || !r.Get(&dim) ||
      !r.Get(&row_floats) || !r.Get(&groups) || dim <= 0 || row_floats < dim ||
      row_floats > (1 << 20)) {
    return bad("bad header");
  }
  RETURN_IF_ERROR(header(dim, row_floats));
  const size_t row_bytes = 24 + sizeof(float) * row_floats;
  absl::string_view rest = blob.substr(20);
  auto take_u64 = [&rest](uint64_t* v) {
    if (rest.size() < 8) return false;
    std::memcpy(v, rest.data(), 8);
    rest.remove_prefix(8);
    return true;
  };
  for (uint64_t g = 0; g < groups; ++g) {
    uint64_t rows = 0;
    if (!take_u64(&rows)) return bad("truncated row count");
    if (rows > rest.size() / row_bytes) return bad("truncated row");
    for (uint64_t i = 0; i < rows; ++i) {
      SparseRecord rec;
      std::memcpy(&rec.key, rest.data(), 8);
      rec.raw = rest.substr(0, row_bytes);
      rec.row = rest.data() + 24;
      RETURN_IF_ERROR(row(rec));
      rest.remove_prefix(row_bytes);
    }
    uint64_t sightings = 0;
    if (!take_u64(&sightings)) return bad("truncated sightings count");
    if (sightings > rest.size() / 24) return bad("truncated sighting");
    for (uint64_t i = 0; i < sightings; ++i) {
      uint64_t key = 0;
      std::memcpy(&key, rest.data(), 8);
      RETURN_IF_ERROR(sighting(key, rest.substr(0, 24)));
      rest.remove_prefix(24);
    }
  }
  if (!rest.empty()) return bad("trailing bytes");
  return absl::OkStatus();
}

}  // namespace shardps
