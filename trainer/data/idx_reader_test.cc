#include "trainer/data/idx_reader.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/data/testing/data_files.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

void PutBigEndian(uint32_t v, std::string* out) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

std::string ImagesFile(uint32_t count, uint32_t rows, uint32_t cols,
                       uint32_t magic = 0x00000803) {
  std::string s;
  PutBigEndian(magic, &s);
  PutBigEndian(count, &s);
  PutBigEndian(rows, &s);
  PutBigEndian(cols, &s);
  for (uint32_t i = 0; i < count * rows * cols; ++i) {
    s.push_back(static_cast<char>(i % 256));
  }
  return s;
}

std::string LabelsFile(const std::vector<uint8_t>& labels,
                       uint32_t magic = 0x00000801) {
  std::string s;
  PutBigEndian(magic, &s);
  PutBigEndian(static_cast<uint32_t>(labels.size()), &s);
  for (uint8_t l : labels) s.push_back(static_cast<char>(l));
  return s;
}

class IdxReaderTest : public ::testing::Test {
 protected:
  // `contents` as tmp_/name, gzip-compressed when `gzip`; returns the path.
  std::string Write(const std::string& name, const std::string& contents,
                    bool gzip) {
    const std::string path = tmp_.Path(name);
    testing::WriteDataFile(path, contents, gzip);
    return path;
  }

  testing::ScopedTempDir tmp_{"idx_reader_test"};
};

TEST_F(IdxReaderTest, ReadsPlainAndGzipped) {
  for (bool gzip : {false, true}) {
    const std::string images = Write("img", ImagesFile(3, 2, 3), gzip);
    const std::string labels = Write("lab", LabelsFile({4, 0, 2}), gzip);
    absl::StatusOr<IdxData> data = ReadIdxImagesAndLabels(images, labels, 0.5f);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->num_records, 3);
    EXPECT_EQ(data->dim, 6);
    EXPECT_EQ(data->num_classes, 5);
    EXPECT_EQ(data->labels, (std::vector<int32_t>{4, 0, 2}));
    ASSERT_EQ(data->features.size(), 18u);
    for (int i = 0; i < 18; ++i) EXPECT_EQ(data->features[i], 0.5f * i);
    absl::StatusOr<int64_t> count = ReadIdxRecordCount(images);
    ASSERT_TRUE(count.ok()) << count.status();
    EXPECT_EQ(*count, 3);
    count = ReadIdxRecordCount(labels);
    ASSERT_TRUE(count.ok()) << count.status();
    EXPECT_EQ(*count, 3);
  }
}

TEST_F(IdxReaderTest, EmptyFiles) {
  const std::string images = Write("img", ImagesFile(0, 28, 28), false);
  const std::string labels = Write("lab", LabelsFile({}), false);
  absl::StatusOr<IdxData> data = ReadIdxImagesAndLabels(images, labels, 1.0f);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_records, 0);
  EXPECT_EQ(data->dim, 784);
  EXPECT_EQ(data->num_classes, 0);
}

TEST_F(IdxReaderTest, MissingFileIsNotFound) {
  const std::string labels = Write("lab", LabelsFile({1}), false);
  const std::string missing = tmp_.Path("nope.gz");
  absl::StatusOr<IdxData> data = ReadIdxImagesAndLabels(missing, labels, 1.0f);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(data.status().message(), HasSubstr(missing));
  EXPECT_EQ(ReadIdxRecordCount(missing).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(IdxReaderTest, TruncatedIsDataLoss) {
  for (bool gzip : {false, true}) {
    std::string img = ImagesFile(4, 2, 2);
    img.resize(img.size() - 3);
    const std::string images = Write(gzip ? "img.gz" : "img", img, gzip);
    const std::string labels = Write("lab", LabelsFile({0, 1, 0, 1}), gzip);
    absl::StatusOr<IdxData> data = ReadIdxImagesAndLabels(images, labels, 1.0f);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(data.status().message(), HasSubstr(images));

    const std::string short_labels =
        Write("lab2", LabelsFile({0, 1, 0, 1}).substr(0, 10), gzip);
    const std::string good_images = Write("img2", ImagesFile(4, 2, 2), gzip);
    data = ReadIdxImagesAndLabels(good_images, short_labels, 1.0f);
    EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(data.status().message(), HasSubstr(short_labels));

    const std::string header_only =
        Write("hdr", std::string("\0\0\x08", 3), gzip);
    EXPECT_EQ(ReadIdxRecordCount(header_only).status().code(),
              absl::StatusCode::kDataLoss);
  }
}

TEST_F(IdxReaderTest, CorruptGzipIsDataLoss) {
  const std::string path = Write("img.gz", ImagesFile(50, 8, 8), true);
  // Flip bytes in the middle of the deflate stream.
  FILE* f = std::fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::fseek(f, 20, SEEK_SET);
  const char junk[8] = {'\xff', '\x00', '\xff', '\x00',
                        '\xff', '\x00', '\xff', '\x00'};
  std::fwrite(junk, 1, sizeof(junk), f);
  std::fclose(f);
  std::vector<uint8_t> l(50, 1);
  const std::string labels = Write("lab", LabelsFile(l), false);
  absl::StatusOr<IdxData> data = ReadIdxImagesAndLabels(path, labels, 1.0f);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(data.status().message(), HasSubstr(path));
}

TEST_F(IdxReaderTest, BadMagicAndMismatchedCounts) {
  const std::string images = Write("img", ImagesFile(2, 2, 2), false);
  const std::string labels = Write("lab", LabelsFile({0, 1}), false);
  // Swapped arguments: each has the other's magic.
  absl::StatusOr<IdxData> data = ReadIdxImagesAndLabels(labels, images, 1.0f);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr(labels));
  EXPECT_THAT(data.status().message(), HasSubstr("magic"));
  // Float images (type 0x0d) are not supported.
  const std::string floats =
      Write("float", ImagesFile(2, 2, 2, 0x00000d03), false);
  data = ReadIdxImagesAndLabels(floats, labels, 1.0f);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadIdxRecordCount(floats).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string three = Write("lab3", LabelsFile({0, 1, 2}), false);
  data = ReadIdxImagesAndLabels(images, three, 1.0f);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(data.status().message(), HasSubstr(three));
}

TEST(IdxReaderRealDataTest, FashionMnistTestSet) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string images = dir + "t10k-images-idx3-ubyte.gz";
  const std::string labels = dir + "t10k-labels-idx1-ubyte.gz";
  if (access(images.c_str(), R_OK) != 0 || access(labels.c_str(), R_OK) != 0) {
    GTEST_SKIP() << "no " << images;
  }
  absl::StatusOr<IdxData> data =
      ReadIdxImagesAndLabels(images, labels, 1.0f / 255);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_records, 10000);
  EXPECT_EQ(data->dim, 784);
  EXPECT_EQ(data->num_classes, 10);
  float max = 0.0f;
  for (float v : data->features) max = std::max(max, v);
  EXPECT_FLOAT_EQ(max, 1.0f);
  std::vector<int> per_class(10);
  for (int32_t l : data->labels) ++per_class[l];
  for (int c : per_class) EXPECT_EQ(c, 1000);
  EXPECT_EQ(*ReadIdxRecordCount(images), 10000);
}

}  // namespace
}  // namespace shardps
