#include "common/storage/fault_injection_env.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/checkpoint.h"

namespace shardps {
namespace {

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

int Index(FaultOp op) { return static_cast<int>(op); }
int Index(FaultPoint point) { return static_cast<int>(point); }

}  // namespace

absl::string_view FaultPointName(FaultPoint point) {
  switch (point) {
    case FaultPoint::kMidWrite:
      return "mid_write";
    case FaultPoint::kAfterDataBeforeManifest:
      return "after_data_before_manifest";
    case FaultPoint::kBeforeRename:
      return "before_rename";
  }
  return "unknown";
}

// A file that counts Appends and Syncs, can be torn, and runs kMidWrite.
class FaultInjectionEnv::File final : public WritableFile {
 public:
  File(FaultInjectionEnv* env, std::string path, int64_t keep_bytes,
       std::unique_ptr<WritableFile> base)
      : env_(env),
        path_(std::move(path)),
        is_blob_(Basename(path_) != kCheckpointManifestName),
        keep_bytes_(keep_bytes),
        base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    absl::Status injected = env_->CountOp(FaultOp::kAppend);
    if (!injected.ok()) {
      RETURN_IF_ERROR(Write(data.substr(0, data.size() / 2)));
      return injected;
    }
    if (is_blob_ && !data.empty() && env_->TakeMidWrite()) {
      size_t half = data.size() / 2;
      RETURN_IF_ERROR(Write(data.substr(0, half)));
      RETURN_IF_ERROR(env_->RunPoint(FaultPoint::kMidWrite, path_));
      return Write(data.substr(half));
    }
    return Write(data);
  }

  absl::Status Sync() override {
    RETURN_IF_ERROR(env_->CountOp(FaultOp::kSync));
    return base_->Sync();
  }

  absl::Status Close() override { return base_->Close(); }

 private:
  // Forwards `data`, minus what a tear drops.
  absl::Status Write(absl::string_view data) {
    size_t n = data.size();
    if (keep_bytes_ >= 0) {
      int64_t room = std::max<int64_t>(0, keep_bytes_ - written_);
      n = std::min<size_t>(n, static_cast<size_t>(room));
    }
    written_ += static_cast<int64_t>(data.size());
    if (n == 0) return absl::OkStatus();
    return base_->Append(data.substr(0, n));
  }

  FaultInjectionEnv* const env_;
  const std::string path_;
  const bool is_blob_;
  const int64_t keep_bytes_;  // -1: not torn
  const std::unique_ptr<WritableFile> base_;
  int64_t written_ = 0;  // bytes the caller appended
};

FaultInjectionEnv::FaultInjectionEnv(Env* target) : EnvWrapper(target) {}

void FaultInjectionEnv::FailNth(FaultOp op, int n, absl::Status error) {
  absl::MutexLock l(&mu_);
  countdown_[Index(op)] = n;
  error_[Index(op)] = std::move(error);
}

void FaultInjectionEnv::TearNextFile(std::string basename, int64_t keep_bytes) {
  absl::MutexLock l(&mu_);
  tear_basename_ = std::move(basename);
  tear_keep_bytes_ = keep_bytes;
}

void FaultInjectionEnv::SetPointCallback(FaultPoint point,
                                         PointCallback callback) {
  absl::MutexLock l(&mu_);
  callbacks_[Index(point)] = std::move(callback);
}

int FaultInjectionEnv::checkpoints_started() const {
  absl::MutexLock l(&mu_);
  return checkpoints_started_;
}

absl::Status FaultInjectionEnv::CountOp(FaultOp op) {
  absl::MutexLock l(&mu_);
  int& left = countdown_[Index(op)];
  if (left == 0 || --left > 0) return absl::OkStatus();
  return error_[Index(op)];
}

absl::Status FaultInjectionEnv::RunPoint(FaultPoint point,
                                         const std::string& path) {
  PointCallback callback;
  int ordinal;
  {
    absl::MutexLock l(&mu_);
    callback = callbacks_[Index(point)];
    ordinal = checkpoints_started_;
  }
  if (!callback) return absl::OkStatus();
  return callback(ordinal, path);
}

bool FaultInjectionEnv::TakeMidWrite() {
  absl::MutexLock l(&mu_);
  if (mid_write_done_for_ == checkpoints_started_) return false;
  mid_write_done_for_ = checkpoints_started_;
  return true;
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectionEnv::NewWritableFile(const std::string& path) {
  absl::string_view base = Basename(path);
  if (base == kCheckpointManifestName) {
    RETURN_IF_ERROR(RunPoint(FaultPoint::kAfterDataBeforeManifest, path));
  }
  int64_t keep_bytes = -1;
  {
    absl::MutexLock l(&mu_);
    if (!tear_basename_.empty() && base == tear_basename_) {
      keep_bytes = tear_keep_bytes_;
      tear_basename_.clear();
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   target()->NewWritableFile(path));
  return std::unique_ptr<WritableFile>(
      new File(this, path, keep_bytes, std::move(file)));
}

absl::Status FaultInjectionEnv::CreateDir(const std::string& dir) {
  absl::string_view base = Basename(dir);
  if (absl::StartsWith(base, kCheckpointDirPrefix) &&
      absl::EndsWith(base, kCheckpointTmpSuffix)) {
    absl::MutexLock l(&mu_);
    ++checkpoints_started_;
  }
  return target()->CreateDir(dir);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& src,
                                           const std::string& dst) {
  RETURN_IF_ERROR(RunPoint(FaultPoint::kBeforeRename, src));
  RETURN_IF_ERROR(CountOp(FaultOp::kRename));
  return target()->RenameFile(src, dst);
}

absl::Status FaultInjectionEnv::ExchangeFiles(const std::string& a,
                                              const std::string& b) {
  RETURN_IF_ERROR(RunPoint(FaultPoint::kBeforeRename, a));
  RETURN_IF_ERROR(CountOp(FaultOp::kExchange));
  return target()->ExchangeFiles(a, b);
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  RETURN_IF_ERROR(CountOp(FaultOp::kSyncDir));
  return target()->SyncDir(dir);
}

// ---------------------------------------------------------------------------
// SHARDPS_TEST_CHECKPOINT_FAULT

absl::StatusOr<CheckpointFaultSpec> ParseCheckpointFaultSpec(
    absl::string_view spec) {
  auto bad = [spec](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        kCheckpointFaultEnvVar, "=\"", spec, "\": ", why,
        "; expected <fault>:<N> with N >= 1 and <fault> one of "
        "crash_mid_write, crash_after_data_before_manifest, "
        "crash_before_rename, fail_append, fail_sync, fail_rename, "
        "fail_sync_dir"));
  };
  size_t colon = spec.rfind(':');
  if (colon == absl::string_view::npos) return bad("no \":<N>\"");
  absl::string_view fault = spec.substr(0, colon);
  CheckpointFaultSpec out;
  if (!absl::SimpleAtoi(spec.substr(colon + 1), &out.n) || out.n < 1) {
    return bad(absl::StrCat("N \"", spec.substr(colon + 1),
                            "\" is not an integer >= 1"));
  }
  static constexpr struct {
    absl::string_view name;
    FaultPoint point;
  } kPoints[] = {
      {"crash_mid_write", FaultPoint::kMidWrite},
      {"crash_after_data_before_manifest",
       FaultPoint::kAfterDataBeforeManifest},
      {"crash_before_rename", FaultPoint::kBeforeRename},
  };
  static constexpr struct {
    absl::string_view name;
    FaultOp op;
  } kOps[] = {
      {"fail_append", FaultOp::kAppend},
      {"fail_sync", FaultOp::kSync},
      {"fail_rename", FaultOp::kRename},
      {"fail_sync_dir", FaultOp::kSyncDir},
  };
  for (const auto& p : kPoints) {
    if (fault == p.name) {
      out.crash = true;
      out.point = p.point;
      return out;
    }
  }
  for (const auto& o : kOps) {
    if (fault == o.name) {
      out.crash = false;
      out.op = o.op;
      return out;
    }
  }
  return bad(absl::StrCat("unknown fault \"", fault, "\""));
}

void ApplyCheckpointFault(const CheckpointFaultSpec& spec,
                          FaultInjectionEnv* env, std::function<void()> crash) {
  if (!crash) crash = [] { _exit(1); };
  if (spec.crash) {
    const int n = spec.n;
    const FaultPoint point = spec.point;
    env->SetPointCallback(
        point,
        [n, point, crash](int checkpoint,
                          const std::string& path) -> absl::Status {
          if (checkpoint != n) return absl::OkStatus();
          crash();
          // Reached only when a test's `crash` returns: fail the write as
          // the crash would have interrupted it.
          return absl::AbortedError(
              absl::StrCat("injected crash at ", FaultPointName(point),
                           " of checkpoint ", n, " (", path, ")"));
        });
  } else {
    env->FailNth(
        spec.op, spec.n,
        absl::ErrnoToStatus(EIO, absl::StrCat("injected fault (",
                                              kCheckpointFaultEnvVar, ")")));
  }
}

absl::StatusOr<std::unique_ptr<FaultInjectionEnv>>
CheckpointFaultEnvFromEnvironment(
    Env* target, const std::function<const char*(const char*)>& getenv) {
  const char* value = getenv(kCheckpointFaultEnvVar);
  if (value == nullptr || *value == '\0') {
    return std::unique_ptr<FaultInjectionEnv>();
  }
  ASSIGN_OR_RETURN(CheckpointFaultSpec spec, ParseCheckpointFaultSpec(value));
  auto env = std::make_unique<FaultInjectionEnv>(target);
  ApplyCheckpointFault(spec, env.get());
  return env;
}

}  // namespace shardps
