#ifndef SHARDPS_COMMON_STORAGE_FAULT_INJECTION_ENV_H_
#define SHARDPS_COMMON_STORAGE_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/storage/env.h"

namespace shardps {

// Operations whose n-th call FaultInjectionEnv can fail.
enum class FaultOp {
  kAppend,    // WritableFile::Append (any file)
  kSync,      // WritableFile::Sync
  kRename,    // Env::RenameFile
  kExchange,  // Env::ExchangeFiles
  kSyncDir,   // Env::SyncDir
};

// Named points in a checkpoint write (common/storage/checkpoint.h) where a
// callback can crash the process or fail the operation.
enum class FaultPoint {
  // Halfway through the first non-empty Append to a blob (any file but
  // MANIFEST) of a checkpoint: the first half of that Append's bytes is
  // already in the file.
  kMidWrite,
  // When MANIFEST is about to be created: every blob is written and synced.
  kAfterDataBeforeManifest,
  // Before every RenameFile and ExchangeFiles, i.e. before the commit.
  kBeforeRename,
};

// "mid_write", "after_data_before_manifest", "before_rename".
absl::string_view FaultPointName(FaultPoint point);

// An Env for tests that forwards to another and injects faults: a failed
// n-th Append/Sync/rename, a torn file, or a callback at a named point of a
// checkpoint write (which may _exit the process). It recognises the
// checkpoint layout: a checkpoint write starts with CreateDir of a
// "ckpt-*.tmp" directory and ends its data with a file named MANIFEST.
// Thread-safe. Files it returns must not outlive it.
class FaultInjectionEnv : public EnvWrapper {
 public:
  // Runs at a FaultPoint with the 1-based ordinal of the checkpoint being
  // written through this env (counted from construction) and the path the
  // operation concerns. A non-OK return fails that operation with it (for
  // kMidWrite, the second half of the bytes is then not written). May call
  // _exit(). Called with no lock held.
  using PointCallback =
      std::function<absl::Status(int checkpoint, const std::string& path)>;

  // `target` must outlive this object.
  explicit FaultInjectionEnv(Env* target);

  // The `n`-th call of `op` from now on (n >= 1) fails with `error`, which
  // must not be OK. A failing Append first writes the first half of its
  // bytes (an error in the middle of a write); other operations do nothing.
  // One pending failure per op; a new call replaces it.
  void FailNth(FaultOp op, int n, absl::Status error);

  // Torn write: the next file created whose last path component is
  // `basename` keeps only its first `keep_bytes` bytes. Later Appends to it
  // still report OK, as from a disk that lost what it acknowledged.
  void TearNextFile(std::string basename, int64_t keep_bytes);

  // Sets (or, with an empty function, clears) the callback for `point`.
  void SetPointCallback(FaultPoint point, PointCallback callback);

  // Checkpoint writes started through this env so far.
  int checkpoints_started() const;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  absl::Status CreateDir(const std::string& dir) override;
  absl::Status RenameFile(const std::string& src,
                          const std::string& dst) override;
  absl::Status ExchangeFiles(const std::string& a,
                             const std::string& b) override;
  absl::Status SyncDir(const std::string& dir) override;

 private:
  class File;

  // Counts a call of `op`; returns the injected error if this is the one.
  absl::Status CountOp(FaultOp op);
  // Runs the callback of `point`, if any.
  absl::Status RunPoint(FaultPoint point, const std::string& path);
  // True (once per checkpoint) if the kMidWrite point should run now.
  bool TakeMidWrite();

  static constexpr int kNumOps = 5;
  static constexpr int kNumPoints = 3;

  mutable absl::Mutex mu_;
  int countdown_[kNumOps] ABSL_GUARDED_BY(mu_) = {};  // 0: no fault pending
  absl::Status error_[kNumOps] ABSL_GUARDED_BY(mu_);
  std::string tear_basename_ ABSL_GUARDED_BY(mu_);  // empty: none
  int64_t tear_keep_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  PointCallback callbacks_[kNumPoints] ABSL_GUARDED_BY(mu_);
  int checkpoints_started_ ABSL_GUARDED_BY(mu_) = 0;
  int mid_write_done_for_ ABSL_GUARDED_BY(mu_) = 0;  // a checkpoint ordinal
};

// --- Faults chosen by an environment variable, for multi-process tests ---
//
// SHARDPS_TEST_CHECKPOINT_FAULT=<fault>:<N>, read by the binary's main() (and
// nowhere deeper) through CheckpointFaultEnvFromEnvironment. <N> >= 1.
// <fault> is one of
//   crash_mid_write                   _exit(1) halfway through writing the
//   crash_after_data_before_manifest  N-th checkpoint of this process, at
//   crash_before_rename               that FaultPoint
//   fail_append, fail_sync,           the N-th such operation of this
//   fail_rename, fail_sync_dir        process fails with EIO (the process
//                                     goes on)
// e.g. SHARDPS_TEST_CHECKPOINT_FAULT=crash_mid_write:2 kills a pserver in
// the middle of its second checkpoint. Unset or empty: no fault.
inline constexpr char kCheckpointFaultEnvVar[] =
    "SHARDPS_TEST_CHECKPOINT_FAULT";

struct CheckpointFaultSpec {
  bool crash = false;  // crash at `point`; else fail the n-th `op`
  FaultPoint point = FaultPoint::kMidWrite;
  FaultOp op = FaultOp::kAppend;
  int n = 1;
};

// Parses the variable's value. kInvalidArgument, naming the variable, the
// value and the accepted forms, if it is malformed.
absl::StatusOr<CheckpointFaultSpec> ParseCheckpointFaultSpec(
    absl::string_view spec);

// Arms `env` with `spec`. A crash calls `crash` (default: _exit(1), which
// skips destructors and buffered output, like a kill).
void ApplyCheckpointFault(const CheckpointFaultSpec& spec,
                          FaultInjectionEnv* env,
                          std::function<void()> crash = nullptr);

// Reads kCheckpointFaultEnvVar through `getenv` (which returns nullptr for
// an unset variable; shardps::ProcessEnv() fits). Returns nullptr if it is
// unset or empty, else a FaultInjectionEnv over `target` armed with it;
// kInvalidArgument if it is malformed. `target` must outlive the result.
absl::StatusOr<std::unique_ptr<FaultInjectionEnv>>
CheckpointFaultEnvFromEnvironment(
    Env* target, const std::function<const char*(const char*)>& getenv);

}  // namespace shardps

#endif  // SHARDPS_COMMON_STORAGE_FAULT_INJECTION_ENV_H_
