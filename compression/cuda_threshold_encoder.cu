// GPU threshold/bitmap encoder; see kernels/cuda_threshold_encoder.h.
#include <cmath>
#include <cstring>
#include <cub/device/device_scan.cuh>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compression/cuda_threshold_encoder.h"
#include "kernels/cuda/cuda_status.h"

namespace shardps {
namespace {

constexpr int kThreads = 256;

int Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

// flags[i] = |r_i| >= t; *bad |= r_i is NaN or Inf.
__global__ void FlagKernel(const float* r, size_t n, uint32_t t_bits,
                           int32_t* flags, uint32_t* bad) {
  uint32_t b = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t a = codec::AbsBits(r[i]);
    flags[i] = codec::AtLeast(a, t_bits) ? 1 : 0;
    b |= codec::NonFiniteAbsBits(a) ? 1u : 0u;
  }
  if (b != 0) atomicOr(bad, 1u);
}

// counts[0] = k = pos[n-1] + flags[n-1].
__global__ void TotalKernel(const int32_t* flags, const int32_t* pos, size_t n,
                            int32_t* total) {
  *total = pos[n - 1] + flags[n - 1];
}

// The compaction: selected element i goes to slot pos[i], so the entries
// keep index order; subtracts what is sent.
__global__ void ScatterKernel(float* r, size_t n, float t, uint32_t t_bits,
                              const int32_t* flags, const int32_t* pos,
                              int32_t* entries) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (flags[i] == 0) continue;
    const int32_t e =
        codec::ThresholdEntry(r[i], t_bits, static_cast<int32_t>(i));
    entries[pos[i]] = e;
    r[i] = r[i] - codec::ThresholdEntryValue(e, t);
  }
}

// Word j covers elements 16j..16j+15 (n/16 + 1 words).
__global__ void BitmapKernel(float* r, size_t n, float t, uint32_t t_bits,
                             float half, uint32_t half_bits, int32_t* words,
                             unsigned long long* encoded) {
  const size_t num_words = n / 16 + 1;
  unsigned long long count = 0;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       j < num_words; j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t base = 16 * j;
    const uint32_t len = j < n / 16 ? 16u : static_cast<uint32_t>(n % 16);
    uint32_t word = 0;
    for (uint32_t b = 0; b < len; ++b) {
      const float v = r[base + b];
      const uint32_t code = codec::BitmapCode(v, t_bits, half_bits);
      word |= ((code & 1u) << b) | ((code >> 1) << (b + 16));
      r[base + b] = v - codec::BitmapCodeValue(code, t, half);
    }
    words[j] = static_cast<int32_t>(word);
    count += __popc((word | (word >> 16)) & 0xffffu);
  }
  if (count != 0) atomicAdd(encoded, count);
}

class Encoder : public CudaThresholdEncoder {
 public:
  explicit Encoder(int device) : device_(device) {}
  ~Encoder() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (void* p : {flags_, pos_, entries_, temp_, small_}) {
      if (p != nullptr) cudaFree(p);
    }
    if (host_ != nullptr) cudaFreeHost(host_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // {bad flag, k} and the bitmap's encoded count.
    CUDA_RETURN_IF_ERROR(cudaMalloc(&small_, 16));
    return absl::OkStatus();
  }

  absl::StatusOr<EncodeInfo> Encode(float* residual, size_t n, float threshold,
                                    std::vector<int32_t>* out) override {
    RETURN_IF_ERROR(CheckEncodeArgs(n, threshold));
    EncodeInfo info;
    if (n == 0) return info;
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    const uint32_t t_bits = codec::FloatBits(threshold);
    RETURN_IF_ERROR(Reserve(&flags_, &flags_size_, n * sizeof(int32_t)));
    RETURN_IF_ERROR(Reserve(&pos_, &pos_size_, n * sizeof(int32_t)));
    int32_t* flags = static_cast<int32_t*>(flags_);
    int32_t* pos = static_cast<int32_t*>(pos_);
    uint32_t* bad = static_cast<uint32_t*>(small_);
    int32_t* total = static_cast<int32_t*>(small_) + 1;
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(small_, 0, 16, stream_));
    FlagKernel<<<Blocks(n), kThreads, 0, stream_>>>(residual, n, t_bits, flags,
                                                    bad);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    size_t temp_bytes = 0;
    const int count = static_cast<int>(n);
    CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(
        nullptr, temp_bytes, flags, pos, count, stream_));
    RETURN_IF_ERROR(Reserve(&temp_, &temp_size_, temp_bytes));
    CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(temp_, temp_bytes, flags,
                                                       pos, count, stream_));
    TotalKernel<<<1, 1, 0, stream_>>>(flags, pos, n, total);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    int32_t head[2];
    RETURN_IF_ERROR(ToHost(small_, sizeof(head), head));
    const int64_t k = head[1];
    if (head[0] != 0) {
      info.kind = EncodeInfo::Kind::kNonFinite;
      return info;
    }
    if (k == 0) return info;  // kEmpty
    if (ThresholdMessageInts(static_cast<size_t>(k)) < BitmapMessageInts(n)) {
      return EncodeThreshold(residual, n, threshold, t_bits, k, flags, pos,
                             out);
    }
    return EncodeBitmap(residual, n, threshold, t_bits, k, out);
  }

 private:
  // Appends the threshold message of the `k` elements marked in `flags`
  // (their slots in `pos`) to *out, and subtracts what it sends from
  // `residual`.
  absl::StatusOr<EncodeInfo> EncodeThreshold(float* residual, size_t n,
                                             float threshold, uint32_t t_bits,
                                             int64_t k, const int32_t* flags,
                                             const int32_t* pos,
                                             std::vector<int32_t>* out) {
    EncodeInfo info;
    const size_t old = out->size();
    RETURN_IF_ERROR(Reserve(&entries_, &entries_size_, k * sizeof(int32_t)));
    int32_t* entries = static_cast<int32_t*>(entries_);
    ScatterKernel<<<Blocks(n), kThreads, 0, stream_>>>(
        residual, n, threshold, t_bits, flags, pos, entries);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    out->resize(old + ThresholdMessageInts(static_cast<size_t>(k)));
    int32_t* msg = out->data() + old;
    WriteHeader(static_cast<int32_t>(k), n, threshold, CodecFormat::kThreshold,
                msg);
    RETURN_IF_ERROR(
        ToHost(entries, k * sizeof(int32_t), msg + kCodecHeaderInts));
    info.kind = EncodeInfo::Kind::kThreshold;
    info.selected = info.encoded = k;
    info.bytes = ThresholdMessageInts(static_cast<size_t>(k)) * 4;
    return info;
  }

  // Appends the bitmap message of all `n` elements (`k` of them at least
  // the threshold) to *out, and subtracts what it sends from `residual`.
  absl::StatusOr<EncodeInfo> EncodeBitmap(float* residual, size_t n,
                                          float threshold, uint32_t t_bits,
                                          int64_t k,
                                          std::vector<int32_t>* out) {
    EncodeInfo info;
    unsigned long long* encoded =
        reinterpret_cast<unsigned long long*>(static_cast<char*>(small_) + 8);
    const size_t old = out->size();
    const size_t words = n / 16 + 1;
    RETURN_IF_ERROR(Reserve(&entries_, &entries_size_, words * 4));
    const float half = codec::BitmapHalf(threshold);
    BitmapKernel<<<Blocks(words), kThreads, 0, stream_>>>(
        residual, n, threshold, t_bits, half, codec::FloatBits(half),
        static_cast<int32_t*>(entries_), encoded);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    out->resize(old + BitmapMessageInts(n));
    int32_t* msg = out->data() + old;
    WriteHeader(static_cast<int32_t>(n), n, threshold, CodecFormat::kBitmap,
                msg);
    RETURN_IF_ERROR(ToHost(entries_, words * 4, msg + kCodecHeaderInts));
    unsigned long long enc = 0;
    RETURN_IF_ERROR(ToHost(encoded, sizeof(enc), &enc));
    info.kind = EncodeInfo::Kind::kBitmap;
    info.selected = k;
    info.encoded = static_cast<int64_t>(enc);
    info.bytes = BitmapMessageInts(n) * 4;
    return info;
  }

  // INVALID_ARGUMENT for a threshold that is not finite and > 0, or more
  // elements than the codec allows.
  static absl::Status CheckEncodeArgs(size_t n, float threshold) {
    if (!(threshold > 0.0f) || !std::isfinite(threshold)) {
      return absl::InvalidArgumentError(
          absl::StrCat("threshold must be finite and > 0, got ", threshold));
    }
    if (n > static_cast<uint64_t>(kCodecMaxElements)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "residual has ", n, " elements; the codec allows at most ",
          kCodecMaxElements));
    }
    return absl::OkStatus();
  }
  static void WriteHeader(int32_t count_or_n, size_t n, float t,
                          CodecFormat fmt, int32_t* h) {
    h[0] = count_or_n;
    h[1] = static_cast<int32_t>(n);
    h[2] = static_cast<int32_t>(codec::FloatBits(t));
    h[3] = static_cast<int32_t>(fmt);
  }

  absl::Status Reserve(void** p, size_t* size, size_t bytes) {
    if (bytes <= *size) return absl::OkStatus();
    if (*p != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(*p));
    *p = nullptr;
    *size = 0;
    CUDA_RETURN_IF_ERROR(cudaMalloc(p, bytes));
    *size = bytes;
    return absl::OkStatus();
  }

  // Device -> pinned -> host, after everything queued on the stream.
  absl::Status ToHost(const void* src, size_t bytes, void* dst) {
    if (bytes > host_size_) {
      if (host_ != nullptr) CUDA_RETURN_IF_ERROR(cudaFreeHost(host_));
      host_ = nullptr;
      host_size_ = 0;
      CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_, bytes));
      host_size_ = bytes;
    }
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host_, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    std::memcpy(dst, host_, bytes);
    return absl::OkStatus();
  }

  const int device_;
  cudaStream_t stream_ = nullptr;
  void* flags_ = nullptr;
  size_t flags_size_ = 0;
  void* pos_ = nullptr;
  size_t pos_size_ = 0;
  void* entries_ = nullptr;
  size_t entries_size_ = 0;
  void* temp_ = nullptr;
  size_t temp_size_ = 0;
  void* small_ = nullptr;
  void* host_ = nullptr;
  size_t host_size_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaThresholdEncoder>>
CudaThresholdEncoder::Create(int device) {
  auto e = std::make_unique<Encoder>(device);
  RETURN_IF_ERROR(e->Init());
  return std::unique_ptr<CudaThresholdEncoder>(std::move(e));
}

}  // namespace shardps
