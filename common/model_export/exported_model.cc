#include "common/model_export/exported_model.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/model_export/initial_row.h"
#include "common/storage/blob_io.h"
#include "kernels/half.h"

namespace shardps {
namespace {

constexpr char kParamsMagic[8] = {'S', 'H', 'P', 'S', 'M', 'D', 'L', '1'};
constexpr char kSparseMagic[8] = {'S', 'H', 'P', 'S', 'S', 'P', 'R', '1'};
constexpr uint32_t kFloat32 = 0;
constexpr uint32_t kFloat16 = 1;

uint32_t Crc32(absl::string_view data, uint32_t crc = 0) {
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

// Checks that `data`, read from `path`, is an exported sparse table: its
// magic, and the CRC-32 at its end. DATA_LOSS naming `path` otherwise.
absl::Status CheckSparseTableFile(absl::string_view data,
                                  const std::string& path) {
  auto bad = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (data.size() < sizeof(kSparseMagic) + 4 ||
      std::memcmp(data.data(), kSparseMagic, sizeof(kSparseMagic)) != 0) {
    return bad("not an exported sparse table (bad magic or too short)");
  }
  uint32_t stored = 0;
  std::memcpy(&stored, data.data() + data.size() - 4, 4);
  if (Crc32(absl::string_view(data).substr(0, data.size() - 4)) != stored) {
    return bad("checksum mismatch (damaged)");
  }
  return absl::OkStatus();
}

// Decodes the row values at `p`, float32 or IEEE half (`dtype`), into
// *values, sized for them already.
void DecodeRowValues(const char* p, uint32_t dtype,
                     std::vector<float>* values) {
  if (dtype == kFloat32) {
    std::memcpy(values->data(), p, values->size() * sizeof(float));
  } else {
    for (size_t i = 0; i < values->size(); ++i) {
      uint16_t h = 0;
      std::memcpy(&h, p + 2 * i, 2);
      (*values)[i] = HalfToFloat(h);
    }
  }
}

}  // namespace

std::string EncodeParams(const std::vector<DenseTensorView>& tables) {
  std::string bin(kParamsMagic, sizeof(kParamsMagic));
  AppendPod<uint32_t>(&bin, static_cast<uint32_t>(tables.size()));
  for (const DenseTensorView& t : tables) {
    AppendPod<uint32_t>(&bin, static_cast<uint32_t>(t.name.size()));
    bin += t.name;
    AppendPod<uint32_t>(&bin, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) AppendPod<int64_t>(&bin, d);
    AppendPod<uint64_t>(&bin, t.values.size());
    AppendFloats(&bin, t.values.data(), t.values.size());
  }
  AppendPod<uint32_t>(&bin, Crc32(bin));
  return bin;
}

std::string SparseFileName(const std::string& table_name) {
  return absl::StrCat("sparse-", table_name, ".bin");
}

absl::Status WriteSparseTable(Env* env, const std::string& path,
                              const SparseTableView& t) {
  if (t.dim <= 0 ||
      t.values.size() != t.keys.size() * static_cast<size_t>(t.dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sparse table ", t.name, ": ", t.values.size(),
                     " values for ", t.keys.size(), " keys of dim ", t.dim));
  }
  for (size_t i = 1; i < t.keys.size(); ++i) {
    if (t.keys[i] <= t.keys[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse table ", t.name, ": keys not ascending at ", i));
    }
  }
  std::string head(kSparseMagic, sizeof(kSparseMagic));
  AppendPod<uint32_t>(&head, static_cast<uint32_t>(t.name.size()));
  head += t.name;
  AppendPod<uint32_t>(&head, static_cast<uint32_t>(t.dim));
  AppendPod<uint32_t>(&head, t.fp16 ? kFloat16 : kFloat32);
  AppendPod<uint32_t>(&head, static_cast<uint32_t>(t.init.type()));
  AppendPod<float>(&head, t.init.scale());
  AppendPod<uint64_t>(&head, t.init.seed());
  AppendPod<uint64_t>(&head, t.keys.size());
  const std::string tmp = path + ".tmp";
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewWritableFile(tmp));
  uint32_t crc = Crc32(head);
  absl::Status s = f->Append(head);
  absl::string_view keys(reinterpret_cast<const char*>(t.keys.data()),
                         t.keys.size() * sizeof(uint64_t));
  crc = Crc32(keys, crc);
  if (s.ok()) s = f->Append(keys);
  // Values in pieces of 1 Mi floats.
  constexpr size_t kPiece = 1 << 20;
  std::vector<uint16_t> half;
  for (size_t pos = 0; s.ok() && pos < t.values.size(); pos += kPiece) {
    const size_t n = std::min(kPiece, t.values.size() - pos);
    absl::string_view bytes;
    if (t.fp16) {
      half.resize(n);
      for (size_t i = 0; i < n; ++i) half[i] = FloatToHalf(t.values[pos + i]);
      bytes = absl::string_view(reinterpret_cast<const char*>(half.data()),
                                n * sizeof(uint16_t));
    } else {
      bytes = absl::string_view(
          reinterpret_cast<const char*>(t.values.data() + pos),
          n * sizeof(float));
    }
    crc = Crc32(bytes, crc);
    s = f->Append(bytes);
  }
  std::string tail;
  AppendPod<uint32_t>(&tail, crc);
  if (s.ok()) s = f->Append(tail);
  if (s.ok()) s = f->Sync();
  absl::Status closed = f->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = env->RenameFile(tmp, path);
  return s;
}

absl::StatusOr<ExportedSparseTable> ExportedSparseTable::Read(
    Env* env, const std::string& path) {
  std::string data;
  RETURN_IF_ERROR(env->ReadFileToString(path, &data));
  auto bad = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  RETURN_IF_ERROR(CheckSparseTableFile(data, path));
  BlobReader r(absl::string_view(data).substr(
      sizeof(kSparseMagic), data.size() - sizeof(kSparseMagic) - 4));
  ExportedSparseTable t;
  uint32_t name_len = 0, dim = 0, dtype = 0, init_type = 0;
  float scale = 0;
  uint64_t seed = 0, rows = 0;
  if (!r.Get(&name_len) || name_len > 4096) return bad("bad header");
  t.name_.resize(name_len);
  for (char& c : t.name_) {
    if (!r.Get(&c)) return bad("truncated header");
  }
  if (!r.Get(&dim) || !r.Get(&dtype) || !r.Get(&init_type) || !r.Get(&scale) ||
      !r.Get(&seed) || !r.Get(&rows) || dim == 0 || dim > (1 << 20) ||
      (dtype != kFloat32 && dtype != kFloat16) ||
      !RowInitializer::Type_IsValid(static_cast<int>(init_type))) {
    return bad("bad header");
  }
  const size_t value_bytes = dtype == kFloat16 ? 2 : 4;
  t.dim_ = static_cast<int>(dim);
  t.init_.set_type(static_cast<RowInitializer::Type>(init_type));
  t.init_.set_scale(scale);
  t.init_.set_seed(seed);
  const size_t head = sizeof(kSparseMagic) + 4 + name_len + 4 * 4 + 8 + 8;
  const size_t body = data.size() - 4 - head;
  const uint64_t row_bytes = 8 + value_bytes * dim;
  if (rows > body / row_bytes) return bad("truncated");
  if (body != rows * row_bytes) {
    return bad("trailing bytes");
  }
  const char* p = data.data() + head;
  t.keys_.resize(rows);
  std::memcpy(t.keys_.data(), p, rows * 8);
  p += rows * 8;
  for (size_t i = 1; i < rows; ++i) {
    if (t.keys_[i] <= t.keys_[i - 1]) return bad("keys not ascending");
  }
  t.values_.resize(rows * dim);
  DecodeRowValues(p, dtype, &t.values_);
  return t;
}

bool ExportedSparseTable::Lookup(uint64_t key, float* out) const {
  auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
  if (it == keys_.end() || *it != key) {
    InitialSparseRow(init_, dim_, key, out);
    return false;
  }
  const size_t i = static_cast<size_t>(it - keys_.begin());
  std::memcpy(out, values_.data() + i * dim_, sizeof(float) * dim_);
  return true;
}

}  // namespace shardps
