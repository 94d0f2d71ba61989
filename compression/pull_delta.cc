#include "compression/pull_delta.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compression/threshold_codec.h"
#include "compression/value_encoding.h"

namespace shardps {
namespace {

// Messages kept per block for trainers a few versions behind (async); their
// bytes are also kept below the dense block's.
constexpr size_t kMaxKeptMessages = 64;

uint64_t Key(uint32_t table_id, uint32_t block) {
  return (static_cast<uint64_t>(table_id) << 32) | block;
}

int32_t ReadInt(absl::string_view bytes, size_t i) {
  uint32_t u;
  std::memcpy(&u, bytes.data() + 4 * i, sizeof(u));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  u = __builtin_bswap32(u);
#endif
  return static_cast<int32_t>(u);
}

int64_t MaxEntries(size_t n) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(n) * kPullDeltaMaxFraction));
}

}  // namespace

float ChooseDeltaThreshold(absl::Span<const float> d, int64_t max_entries,
                           std::vector<float>* scratch) {
  if (max_entries < 1) return 0;
  // How many magnitudes have each binary exponent (the float's exponent
  // field: 0 holds zeros and denormals, 255 NaN and Inf, both left out).
  std::array<int64_t, 256> count{};
  for (float v : d) ++count[(codec::FloatBits(v) & 0x7fffffffu) >> 23];
  int top = 254;
  while (top > 0 && count[top] == 0) --top;
  if (top == 0) return 0;
  // The candidates: the largest exponents, down to the one whose elements
  // make max_entries (the search looks no further), and at most 13 binades
  // below the largest: a threshold t below largest / 2^14 would beat
  // t = largest only with more than 2^28 elements at or above it
  // (j t^2 - 2 t S >= -j t^2). That leaves out the rounding differences
  // between the values and the shadow and the many small residuals, most
  // of the block's elements and otherwise most of the work.
  int lowest = top;
  int64_t taken = count[top];
  while (taken < max_entries && lowest > std::max(1, top - 13)) {
    taken += count[--lowest];
  }
  const uint32_t from = static_cast<uint32_t>(lowest) << 23;
  std::vector<float>& mags = *scratch;
  mags.clear();
  mags.reserve(static_cast<size_t>(taken));
  for (float v : d) {
    const uint32_t bits = codec::FloatBits(v) & 0x7fffffffu;
    if (bits >= from && bits < 0x7f800000u)
      mags.push_back(codec::BitsToFloat(bits));
  }
  const size_t k = std::min(mags.size(), static_cast<size_t>(max_entries));
  std::nth_element(mags.begin(), mags.begin() + (k - 1), mags.end(),
                   std::greater<float>());
  std::sort(mags.begin(), mags.begin() + k, std::greater<float>());
  // Sending every |d_i| >= t as t leaves sum (|d_i| - t)^2 over those,
  // which is the untouched sum plus j t^2 - 2 t S (S: their sum): the
  // threshold minimises that over the candidates (ends of runs of equal
  // magnitudes, where j counts every element at or above t).
  double sum = 0, best = 0;
  float chosen = mags[0];
  for (size_t j = 0; j < k; ++j) {
    sum += mags[j];
    if (j + 1 < k && mags[j + 1] == mags[j]) continue;
    const double t = mags[j];
    const double f = static_cast<double>(j + 1) * t * t - 2 * t * sum;
    if (f < best) {
      best = f;
      chosen = mags[j];
    }
  }
  return chosen;
}

absl::Status EncodePullDelta(absl::Span<const float> values,
                             absl::Span<float> shadow, int64_t max_entries,
                             std::vector<int32_t>* msg,
                             std::vector<float>* scratch,
                             std::vector<float>* mags) {
  if (values.size() != shadow.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pull delta of ", values.size(), " values against ",
                     shadow.size(), " held"));
  }
  msg->clear();
  scratch->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    (*scratch)[i] = values[i] - shadow[i];
  }
  const float t = ChooseDeltaThreshold(*scratch, max_entries, mags);
  if (t == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      const EncodeInfo info,
      EncodeThreshold(absl::MakeSpan(*scratch), t, max_entries, msg));
  (void)info;
  return DecodeAdd(*msg, shadow);
}

absl::Status DecodeAddChain(absl::string_view chain, absl::Span<float> target) {
  if (chain.size() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a pull delta of ", chain.size(), " bytes, not a multiple of 4"));
  }
  const size_t ints = chain.size() / 4;
  size_t at = 0;
  for (int m = 0; at < ints; ++m) {
    if (ints - at < kCodecHeaderInts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pull delta message ", m, ": ", ints - at, " ints, no header"));
    }
    const int32_t first = ReadInt(chain, at);
    const int32_t n = ReadInt(chain, at + 1);
    const int32_t fmt = ReadInt(chain, at + 3);
    int64_t len;
    if (fmt == static_cast<int32_t>(CodecFormat::kThreshold)) {
      len = static_cast<int64_t>(kCodecHeaderInts) + first;
    } else {
      len = n < 0 ? -1 : static_cast<int64_t>(BitmapMessageInts(n));
    }
    if (first < 0 || len < static_cast<int64_t>(kCodecHeaderInts) ||
        static_cast<uint64_t>(len) > ints - at) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull delta message ", m, ": its header gives ", len,
                       " ints, ", ints - at, " left"));
    }
    if (absl::Status s = DecodeAddBytes(chain.substr(4 * at, 4 * len), target);
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull delta message ", m, ": ", s.message()));
    }
    at += len;
  }
  return absl::OkStatus();
}

PullDeltaEncoder::PullDeltaEncoder(Accounting accounting)
    : accounting_(std::move(accounting)) {
  std::random_device rd;
  next_epoch_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

PullDeltaEncoder::~PullDeltaEncoder() {
  int64_t reserved = 0;
  absl::MutexLock l(&mu_);
  for (auto& [key, b] : blocks_) {
    absl::MutexLock bl(&b->mu);
    reserved += b->reserved;
  }
  if (reserved > 0 && accounting_.release) accounting_.release(reserved);
}

uint64_t PullDeltaEncoder::NextEpoch() {
  uint64_t e = 0;
  while (e == 0) e = ++next_epoch_;
  return e;
}

PullDeltaEncoder::Block* PullDeltaEncoder::Find(uint32_t table_id,
                                                uint32_t block) {
  absl::MutexLock l(&mu_);
  std::unique_ptr<Block>& b = blocks_[Key(table_id, block)];
  if (b == nullptr) b = std::make_unique<Block>();
  return b.get();
}

absl::Status PullDeltaEncoder::Advance(Block* b, uint64_t generation,
                                       int64_t version,
                                       absl::Span<const float> values) {
  if (b->epoch == 0 || b->generation != generation ||
      b->shadow.size() != values.size()) {
    const int64_t need =
        static_cast<int64_t>(values.size()) * kBytesPerValue - b->reserved;
    if (need > 0 && accounting_.reserve && !accounting_.reserve(need)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a compressed pull needs ", need,
          " bytes for the shadow of a block of ", values.size(),
          " values, more than the pserver's memory limit leaves; pull it "
          "dense (trainer --compressed_pulls=false) or raise the limit"));
    }
    if (need > 0) b->reserved += need;
    // A new shadow: the values themselves, dense to everyone.
    b->epoch = NextEpoch();
    b->generation = generation;
    b->version = version;
    b->shadow.assign(values.begin(), values.end());
    b->recent.clear();
    b->recent_bytes = 0;
    return absl::OkStatus();
  }
  // An older version than the shadow's (pulls of an async job answered out
  // of order) is served from the shadow as it is.
  if (version <= b->version) return absl::OkStatus();
  RETURN_IF_ERROR(EncodePullDelta(values, absl::MakeSpan(b->shadow),
                                  MaxEntries(values.size()), &b->msg,
                                  &b->scratch, &b->mags));
  Message m{b->version, version, std::string()};
  AppendMessageBytes(b->msg, &m.bytes);
  b->version = version;
  b->recent_bytes += m.bytes.size();
  b->recent.push_back(std::move(m));
  while (b->recent.size() > kMaxKeptMessages ||
         b->recent_bytes > b->shadow.size() * sizeof(float)) {
    b->recent_bytes -= b->recent.front().bytes.size();
    b->recent.pop_front();
  }
  return absl::OkStatus();
}

absl::Status PullDeltaEncoder::Serve(uint32_t table_id, uint32_t block,
                                     uint64_t generation, int64_t version,
                                     absl::Span<const float> values,
                                     uint64_t held_epoch, int64_t held_version,
                                     std::string* out, Reply* reply) {
  Block* b = Find(table_id, block);
  absl::MutexLock l(&b->mu);
  RETURN_IF_ERROR(Advance(b, generation, version, values));
  reply->epoch = b->epoch;
  reply->version = b->version;
  out->clear();
  if (held_epoch == b->epoch && held_version <= b->version) {
    // The messages from the one that starts at the version held.
    auto it = std::find_if(b->recent.begin(), b->recent.end(),
                           [held_version](const Message& m) {
                             return m.base_version == held_version;
                           });
    if (held_version == b->version || it != b->recent.end()) {
      size_t bytes = 0;
      for (auto m = it; m != b->recent.end(); ++m) bytes += m->bytes.size();
      if (bytes < b->shadow.size() * sizeof(float)) {
        out->reserve(bytes);
        for (; it != b->recent.end(); ++it) out->append(it->bytes);
        reply->dense = false;
        reply->base_version = held_version;
        return absl::OkStatus();
      }
    }
  }
  reply->dense = true;
  reply->base_version = 0;
  EncodeValues(b->shadow, FLOAT32, out);
  return absl::OkStatus();
}

size_t PullDeltaEncoder::MemoryBytes() const {
  absl::MutexLock l(&mu_);
  size_t n = 0;
  for (const auto& [key, b] : blocks_) {
    absl::MutexLock bl(&b->mu);
    n += b->shadow.capacity() * sizeof(float) + b->recent_bytes +
         (b->scratch.capacity() + b->mags.capacity()) * sizeof(float) +
         b->msg.capacity() * sizeof(int32_t);
  }
  return n;
}

PullDeltaDecoder::PullDeltaDecoder(absl::Span<const BlockSize> blocks) {
  for (const BlockSize& s : blocks) {
    auto b = std::make_unique<Block>();
    {
      absl::MutexLock l(&b->mu);
      b->values.resize(static_cast<size_t>(s.size));
    }
    blocks_[Key(s.table_id, s.block)] = std::move(b);
  }
}

const PullDeltaDecoder::Block* PullDeltaDecoder::Find(uint32_t table_id,
                                                      uint32_t block) const {
  auto it = blocks_.find(Key(table_id, block));
  return it == blocks_.end() ? nullptr : it->second.get();
}

PullDeltaDecoder::Held PullDeltaDecoder::held(uint32_t table_id,
                                              uint32_t block) const {
  const Block* b = Find(table_id, block);
  if (b == nullptr) return Held{};
  absl::MutexLock l(&b->mu);
  return b->held;
}

absl::Status PullDeltaDecoder::Take(uint32_t table_id, uint32_t block,
                                    bool dense, uint64_t epoch,
                                    int64_t base_version, int64_t version,
                                    absl::string_view bytes,
                                    absl::Span<float> target) {
  Block* b = const_cast<Block*>(Find(table_id, block));
  const std::string name =
      absl::StrCat("block ", block, " of table ", table_id);
  if (b == nullptr) {
    return absl::DataLossError(
        absl::StrCat("a compressed pull of ", name, ", not held here"));
  }
  absl::MutexLock l(&b->mu);
  if (target.size() != b->values.size()) {
    return absl::DataLossError(absl::StrCat("a compressed pull of ", name,
                                            " into ", target.size(),
                                            " values, not ", b->values.size()));
  }
  if (dense) {
    if (absl::Status s =
            DecodeValues(bytes, FLOAT32, absl::MakeSpan(b->values));
        !s.ok()) {
      b->held = Held{};
      return absl::DataLossError(
          absl::StrCat("a dense pull of ", name, ": ", s.message()));
    }
  } else {
    if (epoch != b->held.epoch || base_version != b->held.version) {
      return absl::DataLossError(absl::StrCat(
          "a compressed pull of ", name, " applies to version ", base_version,
          " of epoch ", epoch, "; this trainer holds version ", b->held.version,
          " of epoch ", b->held.epoch));
    }
    if (absl::Status s = DecodeAddChain(bytes, absl::MakeSpan(b->values));
        !s.ok()) {
      b->held = Held{};
      return absl::DataLossError(
          absl::StrCat("a compressed pull of ", name, ": ", s.message()));
    }
  }
  b->held = Held{epoch, version};
  std::copy(b->values.begin(), b->values.end(), target.begin());
  return absl::OkStatus();
}

void PullDeltaDecoder::Forget() {
  for (auto& [key, b] : blocks_) {
    absl::MutexLock l(&b->mu);
    b->held = Held{};
  }
}

}  // namespace shardps
