#include "common/shared_memory/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

absl::Status Errno(absl::StatusCode code, absl::string_view what) {
  return absl::Status(code, absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(
    size_t bytes) {
  if (bytes <= kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a shared region needs more than ", kHeaderBytes,
                     " bytes, got ", bytes));
  }
  const int fd =
      memfd_create("shardps-shared-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno(absl::StatusCode::kInternal, "memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    absl::Status s = Errno(absl::StatusCode::kResourceExhausted,
                           "sizing and sealing a shared region");
    close(fd);
    return s;
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    absl::Status s =
        Errno(absl::StatusCode::kResourceExhausted, "mapping a shared region");
    close(fd);
    return s;
  }
  std::random_device rd;
  std::string token(kTokenBytes, '\0');
  for (char& c : token) c = static_cast<char>(rd());
  std::memcpy(base, token.data(), token.size());
  return std::unique_ptr<SharedRegion>(
      new SharedRegion(fd, static_cast<char*>(base), bytes, std::move(token)));
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Attach(
    pid_t pid, int fd, size_t bytes, const std::string& token) {
  if (token.size() != kTokenBytes || bytes <= kHeaderBytes) {
    return absl::FailedPreconditionError(
        "the pserver announced a malformed shared region");
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  const int own = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (own < 0) return Errno(absl::StatusCode::kUnavailable, path);
  struct stat st;
  if (fstat(own, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(own);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not the region announced (size)"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (base == MAP_FAILED) {
    absl::Status s = Errno(absl::StatusCode::kUnavailable, "mapping " + path);
    close(own);
    return s;
  }
  auto region = std::unique_ptr<SharedRegion>(
      new SharedRegion(own, static_cast<char*>(base), bytes, token));
  if (std::memcmp(base, token.data(), token.size()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not the region announced (token): another host?"));
  }
  return region;
}

SharedRegion::~SharedRegion() {
  munmap(base_, size_);
  close(fd_);
}

absl::Status SharedRegion::Check(uint64_t offset, uint64_t bytes,
                                 const char* what) const {
  if (offset % sizeof(float) != 0 || offset < kHeaderBytes || offset > size_ ||
      bytes > size_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": bytes [", offset, ", ", offset, " + ", bytes,
                     ") are not float32 values of the shared region (",
                     kHeaderBytes, " to ", size_, ")"));
  }
  return absl::OkStatus();
}

}  // namespace shardps
