#include "tools/ctr_generator.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardps {
namespace {

constexpr int kIdBits = 40;
constexpr uint64_t kIdMask = (uint64_t{1} << kIdBits) - 1;
constexpr uint64_t kCalibrationStream = 0;
constexpr int kCalibrationSamples = 50000;
constexpr size_t kWriteBufferBytes = 1 << 20;

// SplitMix64 finalizer.
uint64_t Mix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A uniform double in (0, 1) from 53 bits of `bits`.
double Open01(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// A uniform double in [0, 1).
double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// log1p(x) / x, continuous at 0.
double Log1pOverX(double x) {
  if (std::fabs(x) > 1e-8) return std::log1p(x) / x;
  return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

// expm1(x) / x, continuous at 0.
double Expm1OverX(double x) {
  if (std::fabs(x) > 1e-8) return std::expm1(x) / x;
  return 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

}  // namespace

ZipfSampler::ZipfSampler(int64_t n, double exponent)
    : n_(n),
      exponent_(exponent),
      h_integral_x1_(H(1.5) - 1.0),
      h_integral_n_(H(static_cast<double>(n) + 0.5)),
      s_(2.0 - HInverse(H(2.5) - h(2.0))) {}

double ZipfSampler::h(double x) const {
  return std::exp(-exponent_ * std::log(x));
}

double ZipfSampler::H(double x) const {
  const double log_x = std::log(x);
  return Expm1OverX((1.0 - exponent_) * log_x) * log_x;
}

double ZipfSampler::HInverse(double x) const {
  double t = x * (1.0 - exponent_);
  if (t < -1.0) t = -1.0;
  return std::exp(Log1pOverX(t) * x);
}

int64_t ZipfSampler::Sample(std::mt19937_64& rng) const {
  while (true) {
    const double u =
        h_integral_n_ + Uniform01(rng) * (h_integral_x1_ - h_integral_n_);
    const double x = HInverse(u);
    int64_t k = static_cast<int64_t>(x + 0.5);
    if (k < 1) {
      k = 1;
    } else if (k > n_) {
      k = n_;
    }
    if (k - x <= s_ || u >= H(k + 0.5) - h(static_cast<double>(k))) {
      return k - 1;
    }
  }
}

CtrSampleStream::CtrSampleStream(const CtrGenerator* gen, uint64_t stream_id)
    : gen_(gen), rng_(Mix(gen->options().seed, stream_id)) {}

void CtrSampleStream::Next(uint64_t* ids, double* prob, int32_t* label) {
  const int fields = gen_->options_.num_fields;
  ranks_.resize(fields);
  for (int f = 0; f < fields; ++f) {
    ranks_[f] = gen_->zipf_.Sample(rng_);
    ids[f] = gen_->FeatureId(f, ranks_[f]);
  }
  *prob = Sigmoid(gen_->Logit(ranks_.data(), fields));
  *label = Uniform01(rng_) < *prob ? 1 : 0;
}

CtrGenerator::CtrGenerator(const CtrGenOptions& options)
    : options_(options),
      zipf_(options.vocab_per_field, options.zipf_exponent) {}

absl::StatusOr<std::unique_ptr<CtrGenerator>> CtrGenerator::Create(
    const CtrGenOptions& options) {
  if (options.num_fields < 1 || options.vocab_per_field < 1 ||
      static_cast<double>(options.num_fields) *
              static_cast<double>(options.vocab_per_field) >
          std::ldexp(1.0, kIdBits)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_fields (", options.num_fields, ") and vocab_per_field (",
        options.vocab_per_field,
        ") must be >= 1 with num_fields * vocab_per_field <= 2^40"));
  }
  if (!(options.zipf_exponent > 0) || !std::isfinite(options.zipf_exponent)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zipf_exponent ", options.zipf_exponent, " must be positive"));
  }
  if (!(options.weight_stddev >= 0) || !std::isfinite(options.weight_stddev)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_stddev ", options.weight_stddev, " must be >= 0"));
  }
  if (!(options.target_ctr > 0 && options.target_ctr < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("target_ctr ", options.target_ctr, " must be in (0, 1)"));
  }
  std::unique_ptr<CtrGenerator> gen(new CtrGenerator(options));

  // Fit the bias on a calibration stream: the mean of sigmoid(bias + sum of
  // weights) grows with the bias, so bisect.
  std::vector<double> sums(kCalibrationSamples);
  std::vector<int64_t> ranks(options.num_fields);
  CtrSampleStream stream = gen->NewStream(kCalibrationStream);
  for (double& sum : sums) {
    for (int f = 0; f < options.num_fields; ++f) {
      ranks[f] = gen->zipf_.Sample(stream.rng_);
    }
    sum = gen->Logit(ranks.data(), options.num_fields);  // bias_ is still 0
  }
  double lo = -50, hi = 50;
  for (int iter = 0; iter < 100; ++iter) {
    const double mid = 0.5 * (lo + hi);
    double ctr = 0;
    for (double sum : sums) ctr += Sigmoid(mid + sum);
    ctr /= kCalibrationSamples;
    (ctr < options.target_ctr ? lo : hi) = mid;
  }
  gen->bias_ = 0.5 * (lo + hi);
  return gen;
}

uint64_t CtrGenerator::FeatureId(int field, int64_t rank) const {
  // xorshifts and odd multipliers mod 2^40 are each invertible on 40 bits.
  uint64_t x = static_cast<uint64_t>(field) *
                   static_cast<uint64_t>(options_.vocab_per_field) +
               static_cast<uint64_t>(rank);
  x ^= x >> 21;
  x = (x * 0x9e3779b97f4a7c15ULL) & kIdMask;
  x ^= x >> 19;
  x = (x * 0xbf58476d1ce4e5b9ULL) & kIdMask;
  x ^= x >> 20;
  x = (x * 0x94d049bb133111ebULL) & kIdMask;
  x ^= x >> 21;
  if (options_.field_in_high_bits) x |= static_cast<uint64_t>(field) << kIdBits;
  return x;
}

double CtrGenerator::Weight(uint64_t id) const {
  // Box-Muller on two hashed uniforms.
  const uint64_t key = Mix(options_.seed, 0x5eedULL) ^ id;
  const double u1 = Open01(Mix(key, 1));
  const double u2 = Open01(Mix(key, 2));
  return options_.weight_stddev * std::sqrt(-2.0 * std::log(u1)) *
         std::cos(2.0 * M_PI * u2);
}

double CtrGenerator::RankWeight(int field, int64_t rank) const {
  if (options_.signal_ranks > 0 && rank >= options_.signal_ranks) return 0;
  return Weight(FeatureId(field, rank));
}

double CtrGenerator::Logit(const int64_t* ranks, int num_fields) const {
  double sum = bias_;
  for (int f = 0; f < num_fields; ++f) sum += RankWeight(f, ranks[f]);
  return sum;
}

CtrSampleStream CtrGenerator::NewStream(uint64_t stream_id) const {
  return CtrSampleStream(this, stream_id);
}

SparseData GenerateCtrData(const CtrGenerator& gen, uint64_t stream_id,
                           int64_t n, std::vector<float>* probs) {
  const int fields = gen.options().num_fields;
  SparseData data;
  data.num_records = n;
  data.offsets.resize(n + 1);
  data.ids.resize(n * fields);
  data.values.assign(n * fields, 1.0f);
  data.labels.resize(n);
  data.raw_labels.resize(n);
  if (probs != nullptr) probs->resize(n);
  CtrSampleStream stream = gen.NewStream(stream_id);
  for (int64_t r = 0; r < n; ++r) {
    double prob = 0;
    stream.Next(&data.ids[r * fields], &prob, &data.labels[r]);
    data.offsets[r + 1] = (r + 1) * fields;
    data.raw_labels[r] = static_cast<float>(data.labels[r]);
    if (probs != nullptr) (*probs)[r] = static_cast<float>(prob);
  }
  return data;
}

LibsvmWriter::LibsvmWriter(std::string path, FILE* plain, gzFile_s* gz)
    : path_(std::move(path)), plain_(plain), gz_(gz) {
  buf_.reserve(kWriteBufferBytes + 4096);
}

LibsvmWriter::~LibsvmWriter() { Close().IgnoreError(); }

absl::StatusOr<std::unique_ptr<LibsvmWriter>> LibsvmWriter::Open(
    const std::string& path) {
  errno = 0;
  FILE* plain = nullptr;
  gzFile gz = nullptr;
  if (absl::EndsWith(path, ".gz")) {
    gz = gzopen(path.c_str(), "wb1");
    if (gz != nullptr) gzbuffer(gz, 1 << 18);
  } else {
    plain = std::fopen(path.c_str(), "wb");
  }
  if (plain == nullptr && gz == nullptr) {
    const int err = errno;
    const std::string msg =
        absl::StrCat(path, ": cannot create: ", err ? std::strerror(err) : "");
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  return std::unique_ptr<LibsvmWriter>(new LibsvmWriter(path, plain, gz));
}

absl::Status LibsvmWriter::Write(int32_t label, const uint64_t* ids,
                                 const float* values, int num_features) {
  if (!status_.ok()) return status_;
  if (plain_ == nullptr && gz_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": write after Close"));
  }
  absl::StrAppend(&buf_, label);
  for (int i = 0; i < num_features; ++i) {
    if (values[i] == 1.0f) {
      absl::StrAppend(&buf_, " ", ids[i], ":1");
    } else {
      // %.9g keeps every float exactly.
      absl::StrAppendFormat(&buf_, " %d:%.9g", ids[i], values[i]);
    }
  }
  buf_.push_back('\n');
  if (buf_.size() >= kWriteBufferBytes) return Flush();
  return absl::OkStatus();
}

absl::Status LibsvmWriter::Flush() {
  if (buf_.empty() || !status_.ok()) return status_;
  bool ok;
  if (gz_ != nullptr) {
    ok = gzwrite(gz_, buf_.data(), static_cast<unsigned>(buf_.size())) ==
         static_cast<int>(buf_.size());
  } else {
    ok = std::fwrite(buf_.data(), 1, buf_.size(), plain_) == buf_.size();
  }
  if (!ok) {
    status_ = absl::DataLossError(
        absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  buf_.clear();
  return status_;
}

absl::Status LibsvmWriter::Close() {
  if (plain_ == nullptr && gz_ == nullptr) return status_;
  Flush().IgnoreError();
  bool ok;
  if (gz_ != nullptr) {
    ok = gzclose(gz_) == Z_OK;
    gz_ = nullptr;
  } else {
    ok = std::fclose(plain_) == 0;
    plain_ = nullptr;
  }
  if (!ok && status_.ok()) {
    status_ = absl::DataLossError(
        absl::StrCat(path_, ": close failed: ", std::strerror(errno)));
  }
  return status_;
}

std::string ShardPath(const std::string& base, int index) {
  const std::string suffix = absl::StrFormat("-%05d", index);
  if (absl::EndsWith(base, ".gz")) {
    return absl::StrCat(base.substr(0, base.size() - 3), suffix, ".gz");
  }
  return base + suffix;
}

}  // namespace shardps
