// Writes synthetic click-through data with a known truth (see
// tools/ctr_generator.h) as libsvm files, and the planted model's scores.
//
//   gen_ctr_data --train_out=/data/ctr/train.gz
//       --test_out=/data/ctr/test.gz --truth_out=/data/ctr/truth.json
//       [--shards=4] [--seed=1]
//
// With --shards=K the training set goes to K files train-00000.gz ...
// train-0000{K-1}.gz, sample r to file r mod K, so trainer t of K reading file
// t (FilesForTrainer) sees the records that record sharding of the single
// file would give it, in the same order.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gflags/gflags.h"
#include "tools/ctr_generator.h"
#include "trainer/model/auc.h"

DEFINE_string(train_out, "", "training set (libsvm; gzip if it ends in .gz)");
DEFINE_string(test_out, "", "test set (libsvm; gzip if it ends in .gz)");
DEFINE_string(truth_out, "",
              "if set, a JSON line with the true model's test AUC and "
              "logloss, the click rates and the distinct training ids");
DEFINE_int64(num_train, 300000, "training samples");
DEFINE_int64(num_test, 50000, "test samples");
DEFINE_int32(num_fields, 20, "fields: one feature per field per sample");
DEFINE_int64(vocab_per_field, 10000000, "Zipf ranks per field");
DEFINE_double(zipf_exponent, 1.1, "exponent of the per-field Zipf law");
DEFINE_double(weight_stddev, 0.6, "stddev of the planted feature weights");
DEFINE_bool(field_in_high_bits, false,
            "write ids as id | field << 40, for per-field pooling");
DEFINE_int64(signal_ranks, 1000,
             "only the this many most frequent features of a field carry a "
             "planted weight; 0: all");
DEFINE_double(target_ctr, 0.15, "mean click rate the bias is fitted to");
DEFINE_uint64(seed, 1,
              "the data and the planted model depend only on this "
              "and the other flags");
DEFINE_int32(shards, 0,
             "if > 0, write the training set as this many files "
             "<train_out>-00000 ... (before a .gz suffix)");

namespace shardps {
namespace {

struct SetStats {
  int64_t samples = 0;
  int64_t clicks = 0;
  std::vector<float> probs;
  std::vector<int32_t> labels;
};

// Draws `n` samples of `stream_id` and writes them to `writers` (sample r to
// writers[r % size]); keeps the probabilities and labels when `keep_scores`
// and inserts the ids into `distinct` when it is not null.
absl::Status WriteSet(const CtrGenerator& gen, uint64_t stream_id, int64_t n,
                      const std::vector<std::unique_ptr<LibsvmWriter>>& writers,
                      bool keep_scores, absl::flat_hash_set<uint64_t>* distinct,
                      SetStats* stats) {
  const int fields = gen.options().num_fields;
  std::vector<uint64_t> ids(fields);
  const std::vector<float> ones(fields, 1.0f);
  CtrSampleStream stream = gen.NewStream(stream_id);
  for (int64_t r = 0; r < n; ++r) {
    double prob;
    int32_t label;
    stream.Next(ids.data(), &prob, &label);
    if (!writers.empty()) {
      absl::Status s = writers[r % writers.size()]->Write(label, ids.data(),
                                                          ones.data(), fields);
      if (!s.ok()) return s;
    }
    if (distinct != nullptr) distinct->insert(ids.begin(), ids.end());
    ++stats->samples;
    stats->clicks += label;
    if (keep_scores) {
      stats->probs.push_back(static_cast<float>(prob));
      stats->labels.push_back(label);
    }
  }
  for (const auto& w : writers) {
    absl::Status s = w->Close();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<LibsvmWriter>>> OpenWriters(
    const std::string& path, int shards) {
  std::vector<std::unique_ptr<LibsvmWriter>> writers;
  if (path.empty()) return writers;
  for (int k = 0; k < std::max(shards, 1); ++k) {
    absl::StatusOr<std::unique_ptr<LibsvmWriter>> w =
        LibsvmWriter::Open(shards > 0 ? ShardPath(path, k) : path);
    if (!w.ok()) return w.status();
    writers.push_back(std::move(w).value());
  }
  return writers;
}

// The generator's options, as the flags give them.
CtrGenOptions OptionsFromFlags() {
  CtrGenOptions options;
  options.num_fields = FLAGS_num_fields;
  options.vocab_per_field = FLAGS_vocab_per_field;
  options.zipf_exponent = FLAGS_zipf_exponent;
  options.weight_stddev = FLAGS_weight_stddev;
  options.signal_ranks = FLAGS_signal_ranks;
  options.field_in_high_bits = FLAGS_field_in_high_bits;
  options.target_ctr = FLAGS_target_ctr;
  options.seed = FLAGS_seed;
  return options;
}

// The "ctr_truth" JSON line: the flags, the click rates, the distinct
// training ids and the planted model's test AUC and logloss.
std::string TruthJson(const CtrGenOptions& options, const CtrGenerator& gen,
                      const SetStats& train, const SetStats& test,
                      size_t distinct_ids, double seconds) {
  // JSON has no NaN (an AUC without both classes): write null.
  auto num = [](double v) {
    return std::isfinite(v) ? absl::StrFormat("%.17g", v) : "null";
  };
  auto rate = [&](const SetStats& st) {
    return num(st.samples > 0 ? static_cast<double>(st.clicks) / st.samples
                              : std::nan(""));
  };
  return absl::StrFormat(
      "{\"event\":\"ctr_truth\",\"seed\":%d,\"num_train\":%d,"
      "\"num_test\":%d,\"num_fields\":%d,\"vocab_per_field\":%d,"
      "\"zipf_exponent\":%.17g,\"weight_stddev\":%.17g,\"bias\":%.17g,"
      "\"train_ctr\":%s,\"test_ctr\":%s,\"train_distinct_ids\":%d,"
      "\"true_test_auc\":%s,\"true_test_logloss\":%s,"
      "\"seconds\":%.3f}",
      options.seed, train.samples, test.samples, options.num_fields,
      options.vocab_per_field, options.zipf_exponent, options.weight_stddev,
      gen.bias(), rate(train), rate(test), distinct_ids,
      num(Auc(test.probs, test.labels)), num(LogLoss(test.probs, test.labels)),
      seconds);
}

// Writes `json` as one line to --truth_out when it is set; false (after
// saying so on stderr) when the file cannot be written.
bool WriteTruthFile(const std::string& json) {
  if (FLAGS_truth_out.empty()) return true;
  FILE* f = std::fopen(FLAGS_truth_out.c_str(), "w");
  if (f == nullptr || std::fprintf(f, "%s\n", json.c_str()) < 0 ||
      std::fclose(f) != 0) {
    std::fprintf(stderr, "%s: cannot write\n", FLAGS_truth_out.c_str());
    return false;
  }
  return true;
}

int Run() {
  const auto start = std::chrono::steady_clock::now();
  const CtrGenOptions options = OptionsFromFlags();
  if (FLAGS_num_train < 0 || FLAGS_num_test < 0 || FLAGS_shards < 0) {
    std::fprintf(stderr, "--num_train, --num_test and --shards must be >= 0\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<CtrGenerator>> gen =
      CtrGenerator::Create(options);
  if (!gen.ok()) {
    std::fprintf(stderr, "%s\n", gen.status().ToString().c_str());
    return 2;
  }
  auto train_writers = OpenWriters(FLAGS_train_out, FLAGS_shards);
  auto test_writers = OpenWriters(FLAGS_test_out, 0);
  for (const auto* w : {&train_writers, &test_writers}) {
    if (!w->ok()) {
      std::fprintf(stderr, "%s\n", w->status().ToString().c_str());
      return 1;
    }
  }
  absl::flat_hash_set<uint64_t> distinct;
  distinct.reserve(static_cast<size_t>(FLAGS_num_train) * 2);
  SetStats train, test;
  absl::Status s = WriteSet(**gen, CtrGenerator::kTrainStream, FLAGS_num_train,
                            *train_writers,
                            /*keep_scores=*/false, &distinct, &train);
  if (s.ok()) {
    s = WriteSet(**gen, CtrGenerator::kTestStream, FLAGS_num_test,
                 *test_writers, /*keep_scores=*/true, nullptr, &test);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const std::string json =
      TruthJson(options, **gen, train, test, distinct.size(), seconds);
  std::printf("%s\n", json.c_str());
  if (!WriteTruthFile(json)) return 1;
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "gen_ctr_data --train_out=F --test_out=F [--truth_out=F] [--shards=K]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return shardps::Run();
}
