#ifndef SHARDPS_COMMON_SHARED_MEMORY_SHARED_REGION_H_
#define SHARDPS_COMMON_SHARED_MEMORY_SHARED_REGION_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardps {

// Memory that a pserver and a trainer on the same host both map, so that
// dense values move between them without TCP (docs/wire_protocol.md,
// "Shared memory"). The pserver creates it (Create): an anonymous memfd,
// sized, then sealed against shrinking and growing, so that the trainer
// cannot make the pserver's accesses fault; its first bytes are a random
// token. The trainer attaches to it (Attach) through /proc/<pid>/fd/<fd>,
// which works only for a process of the same user on the same host (and PID
// namespace), and checks the token. Values start past the header, at
// offsets the trainer chooses and the pserver checks (Check).
// Thread-safe: the mapping does not change; what is in it is the users'.
class SharedRegion {
 public:
  static constexpr size_t kHeaderBytes = 64;
  static constexpr size_t kTokenBytes = 16;

  // A new region of `bytes` (header included), zero-filled but for the
  // token. INVALID_ARGUMENT when bytes <= kHeaderBytes, or the system's
  // error.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(size_t bytes);
  // The region `fd` of process `pid`, which must be `bytes` long and start
  // with `token`. UNAVAILABLE when it cannot be opened or mapped (another
  // host, another user or PID namespace, no /proc), FAILED_PRECONDITION
  // when it is not the region announced.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Attach(
      pid_t pid, int fd, size_t bytes, const std::string& token);

  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  const std::string& token() const { return token_; }
  char* data() const { return base_; }

  // OK when [offset, offset + bytes) lies past the header and within the
  // region, and offset is a multiple of 4 (float32 values);
  // INVALID_ARGUMENT otherwise, naming `what`.
  absl::Status Check(uint64_t offset, uint64_t bytes, const char* what) const;

 private:
  SharedRegion(int fd, char* base, size_t size, std::string token)
      : fd_(fd), base_(base), size_(size), token_(std::move(token)) {}

  const int fd_;
  char* const base_;
  const size_t size_;
  const std::string token_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_SHARED_MEMORY_SHARED_REGION_H_
