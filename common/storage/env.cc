#include "common/storage/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

// "op path: strerror(err)", with the code errno implies.
absl::Status PosixError(absl::string_view op, const std::string& path,
                        int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(op, " ", path));
}

absl::Status PosixError2(absl::string_view op, const std::string& a,
                         const std::string& b, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(op, " ", a, " -> ", b));
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError("write", path_, errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return PosixError("fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    int fd = fd_;
    fd_ = -1;
    // No retry on EINTR: on Linux the descriptor is closed either way.
    if (::close(fd) != 0) return PosixError("close", path_, errno);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return PosixError("open", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  absl::Status ReadFileToString(const std::string& path,
                                std::string* data) override {
    data->clear();
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return PosixError("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return PosixError("fstat", path, err);
    }
    // Read straight into the string: one allocation of the file's size, no
    // staging buffer. The loop also handles files that grow or shrink.
    size_t size = st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
    data->resize(size);
    size_t got = 0;
    while (true) {
      if (got == data->size()) data->resize(data->size() + 64 * 1024);
      ssize_t n = ::read(fd, &(*data)[got], data->size() - got);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        return PosixError("read", path, err);
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    data->resize(got);
    ::close(fd);
    return absl::OkStatus();
  }

  absl::Status FileExists(const std::string& path) override {
    if (::access(path.c_str(), F_OK) != 0)
      return PosixError("stat", path, errno);
    return absl::OkStatus();
  }

  absl::Status GetChildren(const std::string& dir,
                           std::vector<std::string>* children) override {
    children->clear();
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return PosixError("opendir", dir, errno);
    while (true) {
      errno = 0;
      struct dirent* e = ::readdir(d);
      if (e == nullptr) {
        int err = errno;
        ::closedir(d);
        if (err != 0) return PosixError("readdir", dir, err);
        return absl::OkStatus();
      }
      absl::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      children->emplace_back(name);
    }
  }

  absl::Status CreateDir(const std::string& dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("mkdir: empty path");
    // Create each missing prefix in turn, shortest first.
    for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
      std::string prefix = dir.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return PosixError("mkdir", prefix, errno);
      }
      if (pos == std::string::npos) break;
    }
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return PosixError("stat", dir, errno);
    if (!S_ISDIR(st.st_mode)) return PosixError("mkdir", dir, ENOTDIR);
    return absl::OkStatus();
  }

  absl::Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError("unlink", path, errno);
    return absl::OkStatus();
  }

  absl::Status DeleteDir(const std::string& dir) override {
    std::vector<std::string> children;
    absl::Status s = GetChildren(dir, &children);
    if (!s.ok()) return s;
    for (const std::string& name : children) {
      std::string path = JoinPath(dir, name);
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) continue;  // removed meanwhile
        return PosixError("lstat", path, errno);
      }
      s = S_ISDIR(st.st_mode) ? DeleteDir(path) : DeleteFile(path);
      if (!s.ok() && !absl::IsNotFound(s)) return s;
    }
    if (::rmdir(dir.c_str()) != 0) return PosixError("rmdir", dir, errno);
    return absl::OkStatus();
  }

  absl::Status RenameFile(const std::string& src,
                          const std::string& dst) override {
    if (::rename(src.c_str(), dst.c_str()) != 0) {
      return PosixError2("rename", src, dst, errno);
    }
    return absl::OkStatus();
  }

  absl::Status ExchangeFiles(const std::string& a,
                             const std::string& b) override {
#ifdef RENAME_EXCHANGE
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                    RENAME_EXCHANGE) == 0) {
      return absl::OkStatus();
    }
    int err = errno;
    if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) {
      return absl::UnimplementedError(absl::StrCat(
          "exchange ", a, " <-> ", b, ": not supported here: ", strerror(err)));
    }
    return absl::ErrnoToStatus(err, absl::StrCat("exchange ", a, " <-> ", b));
#else
    return absl::UnimplementedError(absl::StrCat(
        "exchange ", a, " <-> ", b, ": renameat2 is not available"));
#endif
  }

  absl::Status SyncDir(const std::string& dir) override {
    int fd;
    do {
      fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return PosixError("open", dir, errno);
    absl::Status s;
    if (::fsync(fd) != 0) s = PosixError("fsync", dir, errno);
    ::close(fd);
    return s;
  }

  absl::StatusOr<uint64_t> FreeBytes(const std::string& dir) override {
    struct statvfs st;
    if (::statvfs(dir.c_str(), &st) != 0) {
      return PosixError("statvfs", dir, errno);
    }
    return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv;
  return env;
}

absl::Status WriteFileAtomically(Env* env, const std::string& path,
                                 absl::string_view data,
                                 const std::string& tmp) {
  const std::string temp = tmp.empty() ? path + ".tmp" : tmp;
  auto f = env->NewWritableFile(temp);
  if (!f.ok()) return f.status();
  absl::Status s = (*f)->Append(data);
  if (s.ok()) s = (*f)->Sync();
  absl::Status closed = (*f)->Close();
  if (s.ok()) s = closed;
  if (s.ok()) s = env->RenameFile(temp, path);
  return s;
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

}  // namespace shardps
