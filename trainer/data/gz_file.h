#ifndef SHARDPS_TRAINER_DATA_GZ_FILE_H_
#define SHARDPS_TRAINER_DATA_GZ_FILE_H_

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "zlib.h"

namespace shardps {

// A zlib file handle that reads gzip or plain files alike, closed on
// destruction. Thread-compatible.
struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Opens `path` for reading (gzip or plain) with a read buffer of
// `buffer_bytes` (0: zlib's default). NotFound, PermissionDenied or
// Unavailable, naming the file.
inline absl::StatusOr<GzFile> OpenGz(const std::string& path,
                                     unsigned buffer_bytes = 0) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    const std::string msg =
        absl::StrCat(path, ": cannot open: ", err ? std::strerror(err) : "");
    if (err == ENOENT) return absl::NotFoundError(msg);
    if (err == EACCES) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  if (buffer_bytes > 0) gzbuffer(f, buffer_bytes);
  return GzFile(f);
}

}  // namespace shardps

#endif  // SHARDPS_TRAINER_DATA_GZ_FILE_H_
