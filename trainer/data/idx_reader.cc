#include "trainer/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/data/gz_file.h"

namespace shardps {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dim

// An open IDX file positioned after its header.
struct IdxFile {
  std::string path;
  GzFile file;
  std::vector<int64_t> dims;
};

// Reads exactly `size` bytes.
absl::Status ReadFully(gzFile f, const std::string& path, void* buf,
                       size_t size, const char* what) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < size) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(size - done, 1u << 30));
    const int n = gzread(f, p + done, chunk);
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt while reading ", what, ": ", msg));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done < size) {
    return absl::DataLossError(absl::StrCat(path, ": truncated: expected ",
                                            size, " bytes of ", what, ", got ",
                                            done));
  }
  return absl::OkStatus();
}

uint32_t BigEndian32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) |
         (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

// Opens `path` and reads its header, which must carry `magic` (or either
// known magic when `magic` is 0).
absl::StatusOr<IdxFile> OpenIdx(const std::string& path, uint32_t magic) {
  IdxFile idx;
  idx.path = path;
  absl::StatusOr<GzFile> f = OpenGz(path);
  if (!f.ok()) return f.status();
  idx.file = std::move(f).value();
  unsigned char word[4];
  absl::Status s = ReadFully(idx.file.get(), path, word, 4, "header");
  if (!s.ok()) return s;
  const uint32_t got = BigEndian32(word);
  const bool known = got == kImagesMagic || got == kLabelsMagic;
  if (magic != 0 ? got != magic : !known) {
    const std::string want =
        magic == kImagesMagic   ? "0x00000803 (unsigned-byte images)"
        : magic == kLabelsMagic ? "0x00000801 (unsigned-byte labels)"
                                : "0x00000803 or 0x00000801";
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad IDX magic number 0x%08x, want %s", path, got, want));
  }
  const int ndims = static_cast<int>(got & 0xff);
  for (int d = 0; d < ndims; ++d) {
    s = ReadFully(idx.file.get(), path, word, 4, "header");
    if (!s.ok()) return s;
    idx.dims.push_back(static_cast<int64_t>(BigEndian32(word)));
  }
  return idx;
}

}  // namespace

absl::StatusOr<int64_t> ReadIdxRecordCount(const std::string& path) {
  absl::StatusOr<IdxFile> idx = OpenIdx(path, 0);
  if (!idx.ok()) return idx.status();
  return idx->dims[0];
}

absl::StatusOr<IdxData> ReadIdxImagesAndLabels(const std::string& images,
                                               const std::string& labels,
                                               float scale) {
  absl::StatusOr<IdxFile> img = OpenIdx(images, kImagesMagic);
  if (!img.ok()) return img.status();
  absl::StatusOr<IdxFile> lab = OpenIdx(labels, kLabelsMagic);
  if (!lab.ok()) return lab.status();
  if (img->dims[0] != lab->dims[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(images, " has ", img->dims[0], " records but ", labels,
                     " has ", lab->dims[0]));
  }
  const int64_t dim = img->dims[1] * img->dims[2];
  if (dim <= 0 || dim > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        images, ": bad image size ", img->dims[1], "x", img->dims[2]));
  }
  IdxData data;
  data.num_records = img->dims[0];
  data.dim = static_cast<int>(dim);

  std::vector<unsigned char> bytes(static_cast<size_t>(data.num_records));
  absl::Status s =
      ReadFully(lab->file.get(), labels, bytes.data(), bytes.size(), "labels");
  if (!s.ok()) return s;
  data.labels.assign(bytes.begin(), bytes.end());
  for (int32_t l : data.labels)
    data.num_classes = std::max(data.num_classes, l + 1);

  bytes.resize(static_cast<size_t>(data.num_records) * data.dim);
  s = ReadFully(img->file.get(), images, bytes.data(), bytes.size(), "pixels");
  if (!s.ok()) return s;
  data.features.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    data.features[i] = static_cast<float>(bytes[i]) * scale;
  }
  return data;
}

}  // namespace shardps
