#include "trainer/data/libsvm_reader.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/data_shard.h"
#include "trainer/data/testing/data_files.h"

namespace shardps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class LibsvmReaderTest : public ::testing::Test {
 protected:
  // `contents` as tmp_/name, gzip-compressed when `gzip`; returns the path.
  std::string Write(const std::string& name, const std::string& contents,
                    bool gzip = false) {
    const std::string path = tmp_.Path(name);
    testing::WriteDataFile(path, contents, gzip);
    return path;
  }

  testing::ScopedTempDir tmp_{"libsvm_reader_test"};
};

constexpr char kSmall[] =
    "# a comment line\n"
    "+1 1:0.5 3:-2 7:1e-3\n"
    "\n"
    "-1 qid:4 2:1   \t 3:0.25  # trailing comment\n"
    "   \n"
    "0\n"
    "1 18446744073709551615:1 0:2 1099511627776:3\r\n"
    "1.0 5:1";  // no final newline

void ExpectSmall(const SparseData& d) {
  EXPECT_EQ(d.num_records, 5);
  EXPECT_THAT(d.offsets, ElementsAre(0, 3, 5, 5, 8, 9));
  EXPECT_THAT(d.ids, ElementsAre(1, 3, 7, 2, 3, 18446744073709551615ULL, 0,
                                 uint64_t{1} << 40, 5));
  EXPECT_THAT(d.values, ElementsAre(0.5f, -2.0f, 1e-3f, 1.0f, 0.25f, 1.0f, 2.0f,
                                    3.0f, 1.0f));
  EXPECT_THAT(d.labels, ElementsAre(1, 0, 0, 1, 1));
  EXPECT_THAT(d.raw_labels, ElementsAre(1.0f, -1.0f, 0.0f, 1.0f, 1.0f));
}

TEST_F(LibsvmReaderTest, ReadsPlainAndGzip) {
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip);
    const std::string path =
        Write(gzip ? "small.gz" : "small.txt", kSmall, gzip);
    absl::StatusOr<SparseData> d = ReadLibsvm(path);
    ASSERT_TRUE(d.ok()) << d.status();
    ExpectSmall(*d);
    absl::StatusOr<int64_t> count = CountLibsvmRecords(path);
    ASSERT_TRUE(count.ok()) << count.status();
    EXPECT_EQ(*count, 5);
    LibsvmSummary summary;
    ASSERT_TRUE(SummarizeLibsvm(path, &summary).ok());
    EXPECT_EQ(summary.records, 5);
    EXPECT_EQ(summary.features, 9);   // qid:4 is not a feature
    EXPECT_EQ(summary.positives, 3);  // +1, 1 and 1.0
    // 1 3 7 2 3 18446744073709551615 0 1099511627776 5: 3 is there twice.
    EXPECT_EQ(summary.ids.Estimate(), 8);
  }
}

TEST_F(LibsvmReaderTest, SummaryReadsLabelsAtLineAndFileEnds) {
  // Labels ended by a newline, a comment and the end of the file; a label
  // that is not a number is not positive (ReadLibsvm refuses it).
  const std::string path =
      Write("labels", "1\n0 1:1\n2#c\nyes 3:1 4:1\n-1 5:1\n0.5");
  LibsvmSummary summary;
  ASSERT_TRUE(SummarizeLibsvm(path, &summary).ok());
  EXPECT_EQ(summary.records, 6);
  EXPECT_EQ(summary.features, 4);
  EXPECT_EQ(summary.positives, 3);  // 1, 2 and 0.5
  // A second file adds to the first.
  ASSERT_TRUE(SummarizeLibsvm(Write("more", "1 1:1 9:1\n"), &summary).ok());
  EXPECT_EQ(summary.records, 7);
  EXPECT_EQ(summary.features, 6);
  EXPECT_EQ(summary.positives, 4);
  EXPECT_EQ(summary.ids.Estimate(), 5);  // 1, 3, 4, 5 and 9
}

TEST_F(LibsvmReaderTest, EmptyFileHasNoRecords) {
  const std::string path = Write("empty", "# only a comment\n\n");
  absl::StatusOr<SparseData> d = ReadLibsvm(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_records, 0);
  EXPECT_THAT(d->offsets, ElementsAre(0));
  EXPECT_EQ(*CountLibsvmRecords(path), 0);
}

TEST_F(LibsvmReaderTest, LongLines) {
  // One record of 20000 features: longer than the line buffer.
  std::string line = "1";
  for (int i = 0; i < 20000; ++i) {
    line += " " + std::to_string(uint64_t{1} << 40 | i) + ":1";
  }
  const std::string path = Write("long", line + "\n0 1:1\n" + line);
  absl::StatusOr<SparseData> d = ReadLibsvm(path);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->num_records, 3);
  EXPECT_THAT(d->offsets, ElementsAre(0, 20000, 20001, 40001));
  EXPECT_EQ(d->ids[19999], uint64_t{1} << 40 | 19999);
  EXPECT_EQ(d->ids[20000], 1u);
  EXPECT_EQ(*CountLibsvmRecords(path), 3);
}

TEST_F(LibsvmReaderTest, MissingFileIsNotFound) {
  absl::StatusOr<SparseData> d = ReadLibsvm(tmp_.Path("nope.txt"));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(d.status().message(), HasSubstr("nope.txt"));
  EXPECT_EQ(CountLibsvmRecords(tmp_.Path("nope.txt")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(LibsvmReaderTest, MalformedTokensNameFileLineAndToken) {
  struct Case {
    const char* line;
    const char* token;
  };
  const Case cases[] = {
      {"1 3:x", "3:x"},
      {"1 3", "3"},
      {"1 :1", ":1"},
      {"1 3:", "3:"},
      {"1 -3:1", "-3:1"},
      {"1 18446744073709551616:1", "18446744073709551616:1"},  // 2^64
      {"1 abc:1", "abc:1"},
      {"1 3:nan", "3:nan"},
      {"1 3:inf", "3:inf"},
      {"1 3:1e50", "3:1e50"},
      {"1 3:1:2", "3:1:2"},
      {"x 3:1", "x"},
      {"2 3:1", "2"},
      {"0.5 3:1", "0.5"},
      {"3:1 4:1", "3:1"},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string name = "bad" + std::to_string(i++);
    const std::string path =
        Write(name, std::string("1 1:1\n# comment\n") + c.line + "\n0 2:1\n");
    absl::StatusOr<SparseData> d = ReadLibsvm(path);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(d.status().message(), HasSubstr(name + ", line 3"));
    EXPECT_THAT(d.status().message(),
                HasSubstr(std::string("\"") + c.token + "\""));
  }
}

TEST_F(LibsvmReaderTest, NonBinaryLabelsWhenAllowed) {
  const std::string path = Write("reg", "2.5 1:1\n-0.5 2:1\n0 3:1\n");
  LibsvmReadOptions options;
  options.binary_labels = false;
  absl::StatusOr<SparseData> d = ReadLibsvm(path, options);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(d->raw_labels, ElementsAre(2.5f, -0.5f, 0.0f));
  EXPECT_THAT(d->labels, ElementsAre(1, 0, 0));
  EXPECT_EQ(ReadLibsvm(path).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(LibsvmReaderTest, TruncatedGzipIsDataLoss) {
  std::string contents;
  for (int i = 0; i < 5000; ++i) {
    contents += std::to_string(i % 2) + " " + std::to_string(i * 7919) + ":1 " +
                std::to_string(i) + ":0.5\n";
  }
  const std::string path = Write("trunc.gz", contents, /*gzip=*/true);
  const std::string whole = testing::ReadFileOrFail(Env::Default(), path);
  ASSERT_TRUE(ReadLibsvm(path).ok());
  // Cut in the middle of the deflate data, and in the 8-byte trailer.
  for (size_t keep : {whole.size() / 2, whole.size() - 4}) {
    SCOPED_TRACE(keep);
    testing::WriteDataFile(path, whole.substr(0, keep), /*gzip=*/false);
    absl::StatusOr<SparseData> d = ReadLibsvm(path);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << d.status();
    EXPECT_THAT(d.status().message(), HasSubstr("trunc.gz"));
    EXPECT_EQ(CountLibsvmRecords(path).status().code(),
              absl::StatusCode::kDataLoss);
  }
  // A flipped byte in the deflate data.
  std::string corrupt = whole;
  corrupt[corrupt.size() / 2] ^= 0x55;
  testing::WriteDataFile(path, corrupt, /*gzip=*/false);
  EXPECT_EQ(ReadLibsvm(path).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(LibsvmReaderTest, RecordShardingWhileReadingMatchesSelect) {
  std::string a, b;
  for (int r = 0; r < 23; ++r) {
    std::string line = std::to_string(r % 3 == 0 ? 1 : -1);
    for (int k = 0; k <= r % 4; ++k) {
      line += " " + std::to_string(r * 100 + k) + ":" + std::to_string(k);
    }
    (r < 10 ? a : b) += line + "\n";
  }
  const std::vector<std::string> paths = {Write("a", a),
                                          Write("b.gz", b, true)};
  absl::StatusOr<SparseData> all = ReadLibsvmFiles(paths);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->num_records, 23);
  for (int n : {1, 2, 3, 5}) {
    const std::vector<int64_t> counts = RecordsPerTrainer(23, n);
    for (int t = 0; t < n; ++t) {
      SCOPED_TRACE(::testing::Message() << t << " of " << n);
      LibsvmReadOptions options;
      options.shard_index = t;
      options.num_shards = n;
      absl::StatusOr<SparseData> read = ReadLibsvmFiles(paths, options);
      ASSERT_TRUE(read.ok()) << read.status();
      absl::StatusOr<SparseData> sel = SelectSparseRecords(*all, t, n);
      ASSERT_TRUE(sel.ok()) << sel.status();
      EXPECT_EQ(read->num_records, counts[t]);
      EXPECT_EQ(read->num_records, sel->num_records);
      EXPECT_EQ(read->offsets, sel->offsets);
      EXPECT_EQ(read->ids, sel->ids);
      EXPECT_EQ(read->values, sel->values);
      EXPECT_EQ(read->labels, sel->labels);
      EXPECT_EQ(read->raw_labels, sel->raw_labels);
      // Record t of the whole set is this shard's first record.
      if (read->num_records > 0) {
        EXPECT_EQ(read->ids[0], static_cast<uint64_t>(t * 100));
        EXPECT_EQ(read->labels[0], t % 3 == 0 ? 1 : 0);
      }
    }
  }
}

TEST_F(LibsvmReaderTest, ShardArgumentsAreChecked) {
  const std::string path = Write("s", "1 1:1\n");
  LibsvmReadOptions options;
  options.shard_index = 2;
  options.num_shards = 2;
  EXPECT_EQ(ReadLibsvm(path, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  SparseData d = *ReadLibsvm(path);
  EXPECT_EQ(SelectSparseRecords(d, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectSparseRecords(d, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  d.offsets.push_back(5);
  EXPECT_EQ(SelectSparseRecords(d, 0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The heart_scale example that Debian ships with liblinear-tools (and, in
// some releases, libsvm-tools): 270 records, 13 features, labels +1/-1.
TEST_F(LibsvmReaderTest, HeartScale) {
  std::string path;
  for (const char* p :
       {"/usr/share/doc/liblinear-tools/examples/heart_scale",
        "/usr/share/doc/libsvm-tools/examples/heart_scale",
        "/usr/share/doc/libsvm-tools/examples/heart_scale.gz"}) {
    if (access(p, R_OK) == 0) {
      path = p;
      break;
    }
  }
  if (path.empty()) GTEST_SKIP() << "heart_scale not installed";
  absl::StatusOr<SparseData> d = ReadLibsvm(path);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_records, 270);
  EXPECT_EQ(*CountLibsvmRecords(path), 270);
  uint64_t min_id = std::numeric_limits<uint64_t>::max(), max_id = 0;
  for (uint64_t id : d->ids) {
    min_id = std::min(min_id, id);
    max_id = std::max(max_id, id);
  }
  EXPECT_EQ(min_id, 1u);
  EXPECT_EQ(max_id, 13u);
  int positives = 0;
  for (int r = 0; r < 270; ++r) {
    ASSERT_TRUE(d->raw_labels[r] == 1 || d->raw_labels[r] == -1);
    EXPECT_EQ(d->labels[r], d->raw_labels[r] > 0 ? 1 : 0);
    positives += d->labels[r];
    EXPECT_LE(d->offsets[r + 1] - d->offsets[r], 13);
  }
  EXPECT_EQ(positives, 120);
  for (float v : d->values) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LE(v, 1.0f);
  }
  // First line: "+1 1:0.708333 2:1 3:1 4:-0.320755 ...".
  EXPECT_EQ(d->labels[0], 1);
  EXPECT_EQ(d->ids[0], 1u);
  EXPECT_FLOAT_EQ(d->values[0], 0.708333f);
  EXPECT_FLOAT_EQ(d->values[3], -0.320755f);
}

}  // namespace
}  // namespace shardps
