#ifndef SHARDPS_COMMON_STORAGE_BLOB_IO_H_
#define SHARDPS_COMMON_STORAGE_BLOB_IO_H_

// Little-endian binary blobs of fixed-size values, for the pserver's
// checkpoint files (pserver/store/parameter_store.cc,
// pserver/store/sparse/sparse_table.cc). The hosts ShardPS runs on are
// little-endian, so values are copied as they lie in memory.

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/string_view.h"

namespace shardps {

// Appends the bytes of `v`.
template <typename T>
void AppendPod(std::string* out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Appends n floats.
inline void AppendFloats(std::string* out, const float* v, size_t n) {
  out->append(reinterpret_cast<const char*>(v), n * sizeof(float));
}

// Reads values back in the order they were appended. Every getter returns
// false, reading nothing, when too few bytes are left. Requires external
// synchronization.
class BlobReader {
 public:
  explicit BlobReader(absl::string_view data) : data_(data) {}

  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (data_.size() < sizeof(T)) return false;
    std::memcpy(v, data_.data(), sizeof(T));
    data_.remove_prefix(sizeof(T));
    return true;
  }
  // n floats into out[0, n).
  bool GetFloats(float* out, size_t n) {
    if (data_.size() / sizeof(float) < n) return false;
    std::memcpy(out, data_.data(), n * sizeof(float));
    data_.remove_prefix(n * sizeof(float));
    return true;
  }
  // n floats into *out, resized; false for a negative n.
  bool GetFloats(std::vector<float>* out, int64_t n) {
    if (n < 0 || data_.size() / sizeof(float) < static_cast<uint64_t>(n)) {
      return false;
    }
    out->resize(static_cast<size_t>(n));
    return GetFloats(out->data(), out->size());
  }
  // Whether every byte was read.
  bool done() const { return data_.empty(); }

 private:
  absl::string_view data_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_STORAGE_BLOB_IO_H_
