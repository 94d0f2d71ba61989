#ifndef SHARDPS_COMMON_MODEL_EXPORT_EXPORTED_MODEL_H_
#define SHARDPS_COMMON_MODEL_EXPORT_EXPORTED_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/storage/env.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// A trained model for serving (docs/saved_model.md): in one folder,
// params.bin (every dense table: name, shape, float32 values) and one
// sparse-<table>.bin per sparse table (its rows' values by ascending key,
// float32 or float16, and the initializer that gives a key without a row
// its value), with model.pbtxt (the model's config) when it is known.
// Written by `trainer --save_dir` and `ps_checkpoint export`; read by
// ExportedSparseTable here and by python/shardps/exported_model.py.

// One dense table to write.
struct DenseTensorView {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<const float> values;  // row-major, the product of shape
};

// params.bin's bytes: "SHPSMDL1", the table count, per table its name,
// shape and values, and a CRC-32 of everything before it.
std::string EncodeParams(const std::vector<DenseTensorView>& tables);

// One sparse table to write: `keys` ascending and distinct, `values`
// keys.size() * dim floats.
struct SparseTableView {
  std::string name;
  int dim = 0;
  RowInitializer init;
  bool fp16 = false;  // values stored as IEEE half
  absl::Span<const uint64_t> keys;
  absl::Span<const float> values;
};

// "sparse-<name>.bin".
std::string SparseFileName(const std::string& table_name);

// Writes `table` to `path` durably (temporary file, fsync, rename).
// INVALID_ARGUMENT for keys that are not ascending or values of another
// size.
absl::Status WriteSparseTable(Env* env, const std::string& path,
                              const SparseTableView& table);

// A sparse table of an exported model, loaded whole; lookups by binary
// search. Thread-safe once loaded.
class ExportedSparseTable {
 public:
  // DATA_LOSS naming `path` for a file that is not one, truncated, or
  // damaged (CRC-32), or whose keys are not ascending.
  static absl::StatusOr<ExportedSparseTable> Read(Env* env,
                                                  const std::string& path);

  const std::string& name() const { return name_; }
  int dim() const { return dim_; }
  int64_t size() const { return static_cast<int64_t>(keys_.size()); }
  const RowInitializer& init() const { return init_; }

  // `key`'s row (dim floats) to `out`; a key without a row gets its
  // initial value, as a pserver reads it. Returns whether it had a row.
  bool Lookup(uint64_t key, float* out) const;

 private:
  std::string name_;
  int dim_ = 0;
  RowInitializer init_;
  std::vector<uint64_t> keys_;
  std::vector<float> values_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_MODEL_EXPORT_EXPORTED_MODEL_H_
