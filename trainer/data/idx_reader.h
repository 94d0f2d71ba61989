#ifndef SHARDPS_TRAINER_DATA_IDX_READER_H_
#define SHARDPS_TRAINER_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

// Readers for IDX files (the MNIST family: an idx3 file of unsigned-byte
// images and an idx1 file of unsigned-byte labels), gzip-compressed or plain.
// Thread-safe: the functions keep no state.

namespace shardps {

// Records of a data set, in file order.
struct IdxData {
  int64_t num_records = 0;
  int dim = 0;                  // values per record (rows * cols)
  std::vector<float> features;  // num_records * dim, row-major
  std::vector<int32_t> labels;  // num_records
  int num_classes = 0;          // max label + 1 (0 when empty)
};

// Reads an images file (magic 0x00000803) and its labels file (magic
// 0x00000801), multiplying every pixel by `scale`. Errors name the file:
// NotFound for a missing file, InvalidArgument for a bad magic number or
// mismatched record counts, DataLoss for a truncated or corrupt file.
absl::StatusOr<IdxData> ReadIdxImagesAndLabels(const std::string& images,
                                               const std::string& labels,
                                               float scale);

// Reads only the header of an IDX images or labels file and returns its
// record count (the first dimension). Same errors as above.
absl::StatusOr<int64_t> ReadIdxRecordCount(const std::string& path);

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_IDX_READER_H_
