#ifndef SHARDPS_COMMON_STORAGE_ENV_H_
#define SHARDPS_COMMON_STORAGE_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

// The file-system seam (after leveldb's Env). Code that
// writes durable state (checkpoints) goes through an Env so tests can wrap
// it (FaultInjectionEnv) to fail a sync or a rename, tear a file, or kill
// the process at a chosen point.
//
// Every error is an absl::Status whose code follows errno
// (absl::ErrnoToStatusCode: ENOENT is kNotFound, EACCES kPermissionDenied,
// ENOSPC kResourceExhausted, ...) and whose message names the operation,
// the path and the errno text, e.g. "open /x/y: No such file or directory".

// A file being written. Unbuffered: each Append goes to the OS before it
// returns. Requires external synchronization.
class WritableFile {
 public:
  WritableFile() = default;
  WritableFile(const WritableFile&) = delete;
  WritableFile& operator=(const WritableFile&) = delete;
  // Closes the file if Close() was not called; errors are then lost.
  virtual ~WritableFile() = default;

  // Appends all of `data` (retrying short writes and EINTR). On error some
  // prefix of `data` may have been written.
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes the bytes appended so far durable (fsync).
  virtual absl::Status Sync() = 0;
  // Closes the file. No call is allowed after Close(), except the
  // destructor.
  virtual absl::Status Close() = 0;
};

// Thread-safe: implementations must allow concurrent calls from several
// threads (Env::Default() does).
class Env {
 public:
  Env() = default;
  Env(const Env&) = delete;
  Env& operator=(const Env&) = delete;
  virtual ~Env() = default;

  // The POSIX file system. Never deleted; the same object on every call.
  static Env* Default();

  // Creates (or truncates) the file at `path` for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;

  // Replaces *data with the whole content of the file at `path`. On error
  // *data is unspecified.
  virtual absl::Status ReadFileToString(const std::string& path,
                                        std::string* data) = 0;

  // OK if `path` exists (file or directory), kNotFound if it does not,
  // another code if that cannot be told (e.g. kPermissionDenied).
  virtual absl::Status FileExists(const std::string& path) = 0;

  // Replaces *children with the names (not paths) of the entries of `dir`,
  // without "." and "..", in no particular order.
  virtual absl::Status GetChildren(const std::string& dir,
                                   std::vector<std::string>* children) = 0;

  // Creates `dir` and any missing parents (mode 0755). OK if it already
  // exists as a directory.
  virtual absl::Status CreateDir(const std::string& dir) = 0;

  // Removes the file at `path` (not a directory).
  virtual absl::Status DeleteFile(const std::string& path) = 0;

  // Removes `dir` and everything under it (symbolic links are removed, not
  // followed). kNotFound if `dir` does not exist. On error part of the tree
  // may be gone.
  virtual absl::Status DeleteDir(const std::string& dir) = 0;

  // Atomically renames `src` to `dst` (rename(2)): a file replaces an
  // existing file `dst`; a directory replaces only a missing or empty
  // directory `dst`. Both must be on one file system. Durable only after
  // SyncDir() of the parent directories.
  virtual absl::Status RenameFile(const std::string& src,
                                  const std::string& dst) = 0;

  // Atomically swaps two existing paths, files or directories
  // (renameat2(RENAME_EXCHANGE)): no observer ever sees either name
  // missing. kUnimplemented where the OS or file system cannot; callers
  // then fall back to RenameFile. Durable only after SyncDir().
  virtual absl::Status ExchangeFiles(const std::string& a,
                                     const std::string& b) = 0;

  // Makes the entries of `dir` durable (fsync of the directory), so that
  // files created, renamed or deleted in it survive a power cut.
  virtual absl::Status SyncDir(const std::string& dir) = 0;

  // Bytes that an unprivileged writer may still write on the file system
  // holding `dir` (statvfs's f_bavail blocks), so that a caller can tell a
  // full disk before filling it again.
  virtual absl::StatusOr<uint64_t> FreeBytes(const std::string& dir) = 0;
};

// An Env that forwards every call to another one, so a wrapper overrides
// only what it changes (leveldb's EnvWrapper). Thread-safe if the target is.
class EnvWrapper : public Env {
 public:
  // `target` must outlive this object.
  explicit EnvWrapper(Env* target) : target_(target) {}

  Env* target() const { return target_; }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  absl::Status ReadFileToString(const std::string& path,
                                std::string* data) override {
    return target_->ReadFileToString(path, data);
  }
  absl::Status FileExists(const std::string& path) override {
    return target_->FileExists(path);
  }
  absl::Status GetChildren(const std::string& dir,
                           std::vector<std::string>* children) override {
    return target_->GetChildren(dir, children);
  }
  absl::Status CreateDir(const std::string& dir) override {
    return target_->CreateDir(dir);
  }
  absl::Status DeleteFile(const std::string& path) override {
    return target_->DeleteFile(path);
  }
  absl::Status DeleteDir(const std::string& dir) override {
    return target_->DeleteDir(dir);
  }
  absl::Status RenameFile(const std::string& src,
                          const std::string& dst) override {
    return target_->RenameFile(src, dst);
  }
  absl::Status ExchangeFiles(const std::string& a,
                             const std::string& b) override {
    return target_->ExchangeFiles(a, b);
  }
  absl::Status SyncDir(const std::string& dir) override {
    return target_->SyncDir(dir);
  }
  absl::StatusOr<uint64_t> FreeBytes(const std::string& dir) override {
    return target_->FreeBytes(dir);
  }

 private:
  Env* const target_;  // not owned
};

// "dir/name", without doubling a '/' that `dir` already ends with.
std::string JoinPath(absl::string_view dir, absl::string_view name);

// Replaces the file at `path` with `data` so that a crash leaves the old
// file or the new one, whole: written to `tmp` (path + ".tmp" when empty),
// fsynced, closed, renamed over `path`. The caller fsyncs the folder to
// make the rename durable.
absl::Status WriteFileAtomically(Env* env, const std::string& path,
                                 absl::string_view data,
                                 const std::string& tmp = "");

}  // namespace shardps

#endif  // SHARDPS_COMMON_STORAGE_ENV_H_
