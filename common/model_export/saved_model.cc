#include "common/model_export/saved_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/model_export/exported_model.h"
#include "google/protobuf/text_format.h"
#include "zlib.h"

namespace shardps {
namespace {

constexpr char kMagic[8] = {'S', 'H', 'P', 'S', 'M', 'D', 'L', '1'};

// Reads little-endian fields from a buffer, remembering whether it ran out.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > data_.size()) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetBytes(size_t n, std::string* out) {
    if (pos_ + n > data_.size()) return false;
    out->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  const char* Here() const { return data_.data() + pos_; }
  bool Skip(size_t n) {
    if (pos_ + n > data_.size()) return false;
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("cannot write ", tmp, ": ", std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot sync ", tmp, ": ", std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path,
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The bytes of params file `path`, its magic and CRC-32 checked:
// NOT_FOUND when it cannot be opened, DATA_LOSS naming it when it is not
// one or is damaged.
absl::StatusOr<std::string> ReadParamsFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string data = ss.str();
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  };
  if (data.size() < sizeof(kMagic) + 8 ||
      std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("not a ShardPS params file (bad magic or too short)");
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, data.data() + data.size() - 4, 4);
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(data.data()), data.size() - 4));
  if (crc != stored_crc) return corrupt("checksum mismatch (corrupted)");
  return data;
}

}  // namespace

absl::Status SaveModel(const std::string& dir, const ModelConfig& config,
                       const std::vector<DenseTensorView>& tables) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--save_dir: cannot create ", dir, ": ", std::strerror(errno)));
  }
  const std::string bin = EncodeParams(tables);

  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  absl::Status s = WriteFileAtomically(dir + "/params.bin", bin);
  if (!s.ok()) return s;
  return WriteFileAtomically(dir + "/model.pbtxt", text);
}

absl::Status LoadModelParams(const std::string& dir,
                             const std::vector<DenseTensorSlot>& tables) {
  const std::string path = dir + "/params.bin";
  absl::StatusOr<std::string> read = ReadParamsFile(path);
  if (!read.ok()) return read.status();
  const std::string& data = *read;
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  };

  Reader r(data);
  r.Skip(sizeof(kMagic));
  uint32_t n = 0;
  if (!r.Get(&n)) return corrupt("truncated");
  if (n != tables.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has ", n, " tables, the model has ", tables.size()));
  }
  std::vector<std::vector<float>> values(n);
  for (uint32_t i = 0; i < n; ++i) {
    const DenseTensorSlot& t = tables[i];
    uint32_t name_len = 0, ndims = 0;
    std::string name;
    if (!r.Get(&name_len) || !r.GetBytes(name_len, &name) || !r.Get(&ndims)) {
      return corrupt("truncated");
    }
    std::vector<int64_t> shape(ndims);
    for (auto& d : shape) {
      if (!r.Get(&d)) return corrupt("truncated");
    }
    uint64_t count = 0;
    if (!r.Get(&count)) return corrupt("truncated");
    if (name != t.name || shape != t.shape || count != t.values.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": table ", i, " is '", name, "' with ", count,
          " values; the model expects '", t.name, "' with ", t.values.size()));
    }
    values[i].resize(count);
    if (count * sizeof(float) > data.size() - r.pos()) {
      return corrupt("truncated");
    }
    std::memcpy(values[i].data(), r.Here(), count * sizeof(float));
    r.Skip(count * sizeof(float));
  }
  if (r.pos() + 4 != data.size()) return corrupt("trailing bytes");
  // Nothing is written before every table is read and checked.
  for (uint32_t i = 0; i < n; ++i) {
    std::copy(values[i].begin(), values[i].end(), tables[i].values.begin());
  }
  return absl::OkStatus();
}

}  // namespace shardps
