#include "tools/ctr_generator.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/data_shard.h"
#include "trainer/data/libsvm_reader.h"
#include "trainer/model/auc.h"

namespace shardps {
namespace {

std::unique_ptr<CtrGenerator> MustCreate(const CtrGenOptions& options) {
  absl::StatusOr<std::unique_ptr<CtrGenerator>> gen =
      CtrGenerator::Create(options);
  EXPECT_TRUE(gen.ok()) << gen.status();
  return gen.ok() ? std::move(gen).value() : nullptr;
}

void ExpectSameData(const SparseData& a, const SparseData& b) {
  EXPECT_EQ(a.num_records, b.num_records);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.labels, b.labels);
}

TEST(ZipfSamplerTest, MatchesTheLaw) {
  for (double s : {0.8, 1.0, 1.1, 2.0}) {
    SCOPED_TRACE(s);
    const int64_t n = 50;
    ZipfSampler zipf(n, s);
    std::mt19937_64 rng(7);
    std::vector<int64_t> counts(n);
    const int draws = 200000;
    for (int i = 0; i < draws; ++i) {
      const int64_t k = zipf.Sample(rng);
      ASSERT_GE(k, 0);
      ASSERT_LT(k, n);
      ++counts[k];
    }
    double norm = 0;
    for (int64_t k = 0; k < n; ++k) norm += std::pow(k + 1.0, -s);
    for (int64_t k : {0, 1, 2, 9, 49}) {
      const double p = std::pow(k + 1.0, -s) / norm;
      const double sd = std::sqrt(p * (1 - p) / draws);
      EXPECT_NEAR(static_cast<double>(counts[k]) / draws, p, 5 * sd) << k;
    }
  }
  ZipfSampler one(1, 1.1);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one.Sample(rng), 0);
}

TEST(CtrGeneratorTest, RejectsBadOptions) {
  auto bad = [](void (*edit)(CtrGenOptions*)) {
    CtrGenOptions o;
    edit(&o);
    return CtrGenerator::Create(o).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(bad([](CtrGenOptions* o) { o->num_fields = 0; }), kInvalid);
  EXPECT_EQ(bad([](CtrGenOptions* o) { o->vocab_per_field = 0; }), kInvalid);
  EXPECT_EQ(bad([](CtrGenOptions* o) {
              o->num_fields = 2;
              o->vocab_per_field = int64_t{1} << 40;
            }),
            kInvalid);
  EXPECT_EQ(bad([](CtrGenOptions* o) { o->zipf_exponent = 0; }), kInvalid);
  EXPECT_EQ(bad([](CtrGenOptions* o) { o->weight_stddev = -1; }), kInvalid);
  EXPECT_EQ(bad([](CtrGenOptions* o) { o->target_ctr = 1; }), kInvalid);
}

TEST(CtrGeneratorTest, FeatureIdsAreABijectionSpreadOver2To40) {
  CtrGenOptions o;
  o.num_fields = 4;
  o.vocab_per_field = int64_t{1} << 38;  // fills [0, 2^40) exactly
  std::unique_ptr<CtrGenerator> gen = MustCreate(o);
  absl::flat_hash_set<uint64_t> seen;
  int64_t high = 0;
  for (int f = 0; f < 4; ++f) {
    for (int64_t rank = 0; rank < 20000; ++rank) {
      for (int64_t r : {rank, o.vocab_per_field - 1 - rank}) {
        const uint64_t id = gen->FeatureId(f, r);
        ASSERT_LT(id, uint64_t{1} << 40);
        ASSERT_TRUE(seen.insert(id).second) << f << " " << r;
        high += id >> 39;
      }
    }
  }
  // About half the ids have the top bit set.
  EXPECT_NEAR(static_cast<double>(high) / seen.size(), 0.5, 0.02);
}

TEST(CtrGeneratorTest, WeightsAreFixedNormalDraws) {
  CtrGenOptions o;
  o.weight_stddev = 0.5;
  std::unique_ptr<CtrGenerator> gen = MustCreate(o);
  std::unique_ptr<CtrGenerator> same = MustCreate(o);
  double sum = 0, sum2 = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const uint64_t id = gen->FeatureId(i % 20, i);
    const double w = gen->Weight(id);
    ASSERT_EQ(w, same->Weight(id));
    sum += w;
    sum2 += w * w;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum2 / n), 0.5, 0.01);
}

TEST(CtrGeneratorTest, DeterministicForASeed) {
  CtrGenOptions o;
  std::unique_ptr<CtrGenerator> a = MustCreate(o);
  std::unique_ptr<CtrGenerator> b = MustCreate(o);
  EXPECT_EQ(a->bias(), b->bias());
  std::vector<float> pa, pb;
  const SparseData da =
      GenerateCtrData(*a, CtrGenerator::kTrainStream, 2000, &pa);
  const SparseData db =
      GenerateCtrData(*b, CtrGenerator::kTrainStream, 2000, &pb);
  ExpectSameData(da, db);
  EXPECT_EQ(pa, pb);
  // The test stream and another seed give other samples.
  const SparseData test =
      GenerateCtrData(*a, CtrGenerator::kTestStream, 2000, nullptr);
  EXPECT_NE(da.ids, test.ids);
  o.seed = 2;
  std::unique_ptr<CtrGenerator> c = MustCreate(o);
  EXPECT_NE(da.ids,
            GenerateCtrData(*c, CtrGenerator::kTrainStream, 2000, nullptr).ids);
  EXPECT_NE(a->Weight(12345), c->Weight(12345));
}

TEST(CtrGeneratorTest, PlantedModelIsLearnableAndCalibrated) {
  CtrGenOptions o;
  std::unique_ptr<CtrGenerator> gen = MustCreate(o);
  std::vector<float> probs;
  const SparseData d =
      GenerateCtrData(*gen, CtrGenerator::kTestStream, 20000, &probs);
  ASSERT_EQ(d.num_records, 20000);
  EXPECT_EQ(d.offsets.back(), 20000 * 20);
  double clicks = 0, mean_prob = 0;
  for (int64_t r = 0; r < d.num_records; ++r) {
    clicks += d.labels[r];
    mean_prob += probs[r];
    EXPECT_EQ(d.raw_labels[r], static_cast<float>(d.labels[r]));
  }
  clicks /= d.num_records;
  mean_prob /= d.num_records;
  EXPECT_NEAR(mean_prob, o.target_ctr, 0.01);
  EXPECT_NEAR(clicks, o.target_ctr, 0.015);
  const double auc = Auc(probs, d.labels);
  EXPECT_GT(auc, 0.7);
  EXPECT_LT(auc, 0.95);
  // The truth beats a constant predictor.
  const std::vector<float> constant(d.num_records, static_cast<float>(clicks));
  EXPECT_LT(LogLoss(probs, d.labels), LogLoss(constant, d.labels));
  // Field f's ids are the field's own: feature k of a record is in field k.
  for (int64_t rank = 0; rank < 3; ++rank) {
    EXPECT_NE(gen->FeatureId(0, rank), gen->FeatureId(1, rank));
  }
}

class CtrWriterTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) { return tmp_.Path(name); }

  testing::ScopedTempDir tmp_{"ctr_generator_test"};
};

absl::Status WriteAll(const SparseData& d,
                      std::vector<std::unique_ptr<LibsvmWriter>>& writers) {
  for (int64_t r = 0; r < d.num_records; ++r) {
    const int64_t b = d.offsets[r];
    absl::Status s = writers[r % writers.size()]->Write(
        d.labels[r], &d.ids[b], &d.values[b],
        static_cast<int>(d.offsets[r + 1] - b));
    if (!s.ok()) return s;
  }
  for (auto& w : writers) {
    absl::Status s = w->Close();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST_F(CtrWriterTest, RoundTripsThroughTheReader) {
  CtrGenOptions o;
  o.num_fields = 5;
  std::unique_ptr<CtrGenerator> gen = MustCreate(o);
  SparseData d =
      GenerateCtrData(*gen, CtrGenerator::kTrainStream, 500, nullptr);
  d.values[3] = 0.1f;  // not 1: written with enough digits to read back
  d.values[7] = -3.25e-20f;
  for (const char* name : {"train.txt", "train.gz"}) {
    SCOPED_TRACE(name);
    const std::string path = Path(name);
    std::vector<std::unique_ptr<LibsvmWriter>> writers;
    writers.push_back(std::move(*LibsvmWriter::Open(path)));
    ASSERT_TRUE(WriteAll(d, writers).ok());
    absl::StatusOr<SparseData> back = ReadLibsvm(path);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameData(d, *back);
    EXPECT_EQ(*CountLibsvmRecords(path), 500);
  }
  EXPECT_EQ(LibsvmWriter::Open(Path("no/such/dir.txt")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CtrWriterTest, FileShardsMatchRecordShards) {
  CtrGenOptions o;
  o.num_fields = 3;
  std::unique_ptr<CtrGenerator> gen = MustCreate(o);
  const SparseData d =
      GenerateCtrData(*gen, CtrGenerator::kTrainStream, 301, nullptr);
  const int k = 3;
  const std::string base = Path("train.gz");
  std::vector<std::string> files;
  std::vector<std::unique_ptr<LibsvmWriter>> writers;
  for (int i = 0; i < k; ++i) {
    files.push_back(ShardPath(base, i));
    writers.push_back(std::move(*LibsvmWriter::Open(files.back())));
  }
  ASSERT_TRUE(WriteAll(d, writers).ok());
  EXPECT_EQ(files[1], Path("train-00001.gz"));
  for (int t = 0; t < k; ++t) {
    absl::StatusOr<std::vector<std::string>> mine =
        FilesForTrainer(files, t, k);
    ASSERT_TRUE(mine.ok()) << mine.status();
    ASSERT_EQ(mine->size(), 1u);
    absl::StatusOr<SparseData> read = ReadLibsvmFiles(*mine);
    ASSERT_TRUE(read.ok()) << read.status();
    ExpectSameData(*read, *SelectSparseRecords(d, t, k));
  }
}

TEST(ShardPathTest, NamesParseAsShards) {
  EXPECT_EQ(ShardPath("/d/train.gz", 3), "/d/train-00003.gz");
  EXPECT_EQ(ShardPath("/d/train.libsvm", 12), "/d/train.libsvm-00012");
  EXPECT_EQ(*ParseShardSuffix(ShardPath("/d/my-train.libsvm.gz", 7)), 7);
  EXPECT_EQ(*ParseShardSuffix(ShardPath("train", 0)), 0);
}

}  // namespace
}  // namespace shardps
