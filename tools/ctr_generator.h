#ifndef SHARDPS_TOOLS_CTR_GENERATOR_H_
#define SHARDPS_TOOLS_CTR_GENERATOR_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainer/data/libsvm_reader.h"

struct gzFile_s;  // zlib.h

// Synthetic click-through data with a known truth, for sparse CTR models.
//
// A sample has one feature in each of `num_fields` fields. In each field the
// feature's rank (0 = most frequent) is Zipf-distributed over
// `vocab_per_field` ranks, and (field, rank) is mapped to a 40-bit id by a
// fixed bijection, so ids look random over [0, 2^40). The planted model is
// logistic: every id has a weight ~ N(0, weight_stddev) drawn from a
// generator seeded by (seed, id), and
//   P(click) = sigmoid(bias + sum of the sample's weights),
// with the bias fitted (on samples of a separate stream) so the mean click
// rate is `target_ctr`. Everything depends only on the options, so a seed
// gives the same data on any machine.

namespace shardps {

struct CtrGenOptions {
  int num_fields = 20;
  // Ranks per field. num_fields * vocab_per_field must be at most 2^40.
  // With the other defaults, 300k samples hold about 1.5 million distinct
  // ids.
  int64_t vocab_per_field = 10000000;
  double zipf_exponent = 1.1;  // P(rank k) ~ (k + 1)^-zipf_exponent; > 0
  double weight_stddev = 0.6;  // the logit's spread is ~ this * sqrt(fields)
  // Only the `signal_ranks` most frequent features of each field carry a
  // planted weight; the rarer ones, most of the distinct ids, are noise, as
  // in real click logs where rare ids say little. 0: every rank carries one.
  int64_t signal_ranks = 1000;
  // Write each id with its field in the bits above 40 (id | field << 40),
  // so that a model can pool its embeddings per field (configs/ctr_dnn).
  bool field_in_high_bits = false;
  double target_ctr = 0.15;  // in (0, 1)
  uint64_t seed = 1;
};

// The ranks of a Zipf law over [0, n), sampled by rejection-inversion
// (Hörmann and Derflinger, 1996): O(1) per sample, no tables. Thread-safe:
// const after construction.
class ZipfSampler {
 public:
  // REQUIRES: n >= 1, exponent > 0.
  ZipfSampler(int64_t n, double exponent);

  // A rank in [0, n); rank k has probability (k + 1)^-exponent / H(n).
  int64_t Sample(std::mt19937_64& rng) const;

 private:
  double H(double x) const;  // integral of h
  double HInverse(double x) const;
  double h(double x) const;  // x^-exponent

  const int64_t n_;
  const double exponent_;
  const double h_integral_x1_;
  const double h_integral_n_;
  const double s_;
};

class CtrGenerator;

// A stream of samples. Requires external synchronization.
class CtrSampleStream {
 public:
  // Draws the next sample: ids[0 .. num_fields) one per field in field
  // order, its true click probability and its label.
  void Next(uint64_t* ids, double* prob, int32_t* label);

 private:
  friend class CtrGenerator;
  CtrSampleStream(const CtrGenerator* gen, uint64_t stream_id);

  const CtrGenerator* const gen_;
  std::mt19937_64 rng_;
  std::vector<int64_t> ranks_;  // of the sample being drawn
};

// The planted model and its sample streams. Thread-safe: const after
// Create().
class CtrGenerator {
 public:
  // Independent streams: the training and the test set.
  static constexpr uint64_t kTrainStream = 1;
  static constexpr uint64_t kTestStream = 2;

  // InvalidArgument for options outside the ranges documented above.
  static absl::StatusOr<std::unique_ptr<CtrGenerator>> Create(
      const CtrGenOptions& options);

  CtrGenerator(const CtrGenerator&) = delete;
  CtrGenerator& operator=(const CtrGenerator&) = delete;

  // The id of the feature of `rank` in `field`: a bijection of
  // field * vocab_per_field + rank onto [0, 2^40) (independent of the seed).
  uint64_t FeatureId(int field, int64_t rank) const;

  // The planted weight of `id`: ~ N(0, weight_stddev), fixed by (seed, id).
  double Weight(uint64_t id) const;

  // The planted weight of the feature of `rank` in `field`: Weight of its
  // id, or 0 beyond signal_ranks.
  double RankWeight(int field, int64_t rank) const;

  // bias + the weights of one sample's features, ranks[f] being field f's.
  double Logit(const int64_t* ranks, int num_fields) const;

  double bias() const { return bias_; }
  const CtrGenOptions& options() const { return options_; }

  // Sample stream `stream_id`; the same id gives the same samples.
  CtrSampleStream NewStream(uint64_t stream_id) const;

 private:
  friend class CtrSampleStream;
  explicit CtrGenerator(const CtrGenOptions& options);

  // Constant after construction
  const CtrGenOptions options_;
  const ZipfSampler zipf_;
  double bias_ = 0;
};

// `n` samples of stream `stream_id` as CSR (every value 1, raw labels 0/1).
// Fills `probs`, if not null, with the true click probabilities.
SparseData GenerateCtrData(const CtrGenerator& gen, uint64_t stream_id,
                           int64_t n, std::vector<float>* probs);

// Writes records as libsvm text lines "<label> <id>:<value> ...", gzip
// (level 1) when the path ends in ".gz". Requires external synchronization.
class LibsvmWriter {
 public:
  // Creates or truncates `path`. NotFound, PermissionDenied or Unavailable
  // naming the file when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<LibsvmWriter>> Open(
      const std::string& path);
  ~LibsvmWriter();

  // Appends one record; values of exactly 1 are written as "1".
  absl::Status Write(int32_t label, const uint64_t* ids, const float* values,
                     int num_features);

  // Flushes and closes the file; DataLoss naming it if a write failed.
  // Further writes are errors.
  absl::Status Close();

 private:
  LibsvmWriter(std::string path, FILE* plain, gzFile_s* gz);
  absl::Status Flush();

  const std::string path_;
  FILE* plain_;  // one of these two is open until Close()
  gzFile_s* gz_;
  std::string buf_;
  absl::Status status_;  // the first error
};

// The path of shard `index` of `base`: "train.gz" -> "train-00003.gz",
// "train.txt" -> "train.txt-00003" (the names ParseShardSuffix reads).
std::string ShardPath(const std::string& base, int index);

}  // namespace shardps

#endif  // SHARDPS_TOOLS_CTR_GENERATOR_H_
