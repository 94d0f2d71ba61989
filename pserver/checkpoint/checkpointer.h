#ifndef SHARDPS_PSERVER_CHECKPOINT_CHECKPOINTER_H_
#define SHARDPS_PSERVER_CHECKPOINT_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/storage/checkpoint.h"
#include "common/storage/env.h"
#include "pserver/store/step/step_barrier.h"
#include "pserver/store/table_snapshot.h"

namespace shardps {

// A pserver's checkpoints in one directory (--checkpoint_dir): snapshots of
// the store written in the background through the Env seam
// (common/storage/checkpoint.h: temporary directory, fsync, rename, manifest
// with CRCs), and read back for a restart or a rollback. Thread-safe.
class Checkpointer {
 public:
  // `env` must outlive this object. Keeps the newest `keep` checkpoints.
  // With `full_every` > 1 (--full_checkpoint_every), of every `full_every`
  // streaming saves the first is full and the others are deltas on the one
  // before (docs/checkpoint_format.md, "Deltas"), and `keep` counts full
  // checkpoints, each with the deltas after it.
  Checkpointer(Env* env, std::string dir, int keep = 2, int full_every = 1);
  // Waits for the write in progress.
  ~Checkpointer();

  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Writes `snapshot` in the background. A write still in progress is
  // waited for first, so at most one runs (back-pressure on the chief).
  // Returns how the previous write ended (OK when there was none), so that
  // whoever asked hears of a failed one at its next request.
  absl::Status Save(StoreSnapshot snapshot);
  // A streaming save (StoreSnapshots::SaveTo): waits for the write in
  // progress, opens the checkpoint of `step` with a blob per table
  // (TableFileName), and calls `begin` with a sink to it; `begin` writes
  // the blobs' headers, marks the store's units and returns the
  // checkpoint's metadata. Then, in the background, `write_rest` writes
  // the units no push has written yet, and the checkpoint is committed.
  // Returns `begin`'s error (nothing is written then); *previous is how the
  // previous write ended, as Save returns it. A checkpoint that cannot be
  // opened counts as a write that failed.
  // `begin` gets the sink, the step of the delta's base (-1: a full save),
  // and whether the store must keep its changes for deltas on this save.
  using BeginFn = std::function<absl::StatusOr<CheckpointInfo>(
      SaveSink*, int64_t delta_base, bool track_changes)>;
  // A `write_rest` that fails (a K-of-N save called off) fails the write:
  // nothing of it is committed.
  absl::Status SaveStreaming(int64_t step, size_t num_tables,
                             const BeginFn& begin,
                             std::function<absl::Status()> write_rest,
                             absl::Status* previous);
  // Waits until no write is in progress; returns the status of the last.
  absl::Status Flush();
  // Called before a snapshot is taken for Save. Waits for the write in
  // progress; then RESOURCE_EXHAUSTED when the last write failed and the
  // folder's file system has less free space than that write needed (plus
  // a tenth), naming the folder, both sizes and the failure: a full disk is
  // not filled again at each request, nor the store copied for nothing.
  // Checkpoints go on once there is room (a write that succeeds clears
  // it). The failure it names counts as told: Save does not return it.
  absl::Status CheckRoom();

  // Steps of the complete checkpoints, oldest first.
  absl::StatusOr<std::vector<int64_t>> Steps() const;
  // The checkpoint of `step`, verified (NotFound, DataLoss).
  absl::StatusOr<StoreSnapshot> Load(int64_t step) const;
  // The newest checkpoint that verifies; a damaged newer one is skipped
  // with a warning. NotFound when there is none.
  absl::StatusOr<StoreSnapshot> LoadNewest() const;
  // The checkpoint of `step` with the ones it stands on: a full checkpoint
  // then the deltas up to `step`, oldest first, each verified. A delta on a
  // checkpoint that is missing or damaged is DATA_LOSS naming both steps.
  absl::StatusOr<std::vector<StoreSnapshot>> LoadChain(int64_t step) const;
  // The newest chain that loads whole; newer ones whose chain does not are
  // skipped with a warning saying why. NOT_FOUND when there is none.
  absl::StatusOr<std::vector<StoreSnapshot>> LoadNewestChain() const;
  // The next streaming save is full (after a rollback or a restore: the
  // store no longer holds what the last save's deltas would build on).
  void ForceFull();
  // Sets the checkpoints of steps after `step` aside (an abandoned timeline,
  // after a rollback to `step` that starts timeline `generation`): renamed
  // to ckpt-<step>.abandoned-g<generation>. The timelines of the newest
  // `keep` rollbacks stay (older ones are deleted, and so are those of the
  // old name ckpt-<step>.abandoned), so that a rollback asked for wrongly,
  // or twice, loses no checkpoint for good: an operator can rename them
  // back.
  absl::Status SetAsideNewerThan(int64_t step, uint64_t generation);

  // Renames every complete-looking checkpoint of a step after `step` to
  // ckpt-<step>.damaged, so that it is neither listed nor chosen for a
  // rollback, yet kept for a post-mortem. Called at start for the ones that
  // LoadNewest skipped because they failed verification.
  absl::Status QuarantineNewerThan(int64_t step);

  // The newest timeline generation this pserver has been on (the file
  // GENERATION in the directory), so that a restart never reuses one:
  // NotFound before the first WriteGeneration.
  absl::StatusOr<uint64_t> ReadGeneration() const;
  // Replaces GENERATION durably (temporary file, fsync, rename, fsync of the
  // directory).
  absl::Status WriteGeneration(uint64_t generation);

  const std::string& dir() const { return dir_; }

  // Called on the writer thread after each checkpoint is committed, with
  // its step (the job manifest of a shared folder, JobManifestWriter).
  // Set before the first Save.
  void set_on_written(std::function<void(int64_t step)> f) {
    on_written_ = std::move(f);
  }

  // What the background writes did, for monitoring.
  struct Stats {
    int64_t written = 0;  // complete checkpoints written
    int64_t failed = 0;   // writes that failed (the previous one is kept)
    int64_t no_room = 0;  // requests CheckRoom refused
    // The last complete one: its step, payload bytes, how long its write
    // took, and when it ended (absl::InfinitePast() before the first).
    int64_t last_step = -1;
    int64_t last_bytes = 0;
    absl::Duration last_duration;
    absl::Time last_time = absl::InfinitePast();
  };
  // Never waits for a write in progress.
  Stats stats() const;

 private:
  static absl::StatusOr<StoreSnapshot> FromLoaded(LoadedCheckpoint loaded);
  // Joins the writer; how its write ended.
  absl::Status WaitForWriter(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records how the write of `step` ended.
  void Finished(int64_t step, const absl::Status& s, int64_t bytes,
                absl::Time start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Joins the background writer.
  void JoinWriter() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // After a full save of `step` in delta mode: removes every checkpoint
  // older than the newest `keep_` full ones (their deltas with them).
  void PruneChains(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // After the save of `step` (a delta on `delta_base` when that is >= 0)
  // ended with `s`: the base, and the length so far, of the chain of deltas
  // the next save builds on.
  void AdvanceChain(int64_t step, const absl::Status& s, int64_t delta_base)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // SaveStreaming's writer thread: writes the units no push has
  // (`write_rest`), commits `stream` with `info` or aborts it, records how
  // the save ended and advances the chain.
  void FinishStream(int64_t step, absl::Time start, int64_t delta_base,
                    CheckpointInfo info,
                    std::unique_ptr<CheckpointStream> stream,
                    const std::function<absl::Status()>& write_rest)
      ABSL_LOCKS_EXCLUDED(write_mu_);

  Env* const env_;
  const std::string dir_;
  const int keep_;
  const int full_every_;
  std::function<void(int64_t)> on_written_;
  // mu_: one Save or Flush at a time (each joins the writer thread).
  absl::Mutex mu_;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  // write_mu_: held by the writer thread while it writes, and by Flush to
  // read the outcome after joining it.
  absl::Mutex write_mu_ ABSL_ACQUIRED_AFTER(mu_);
  CheckpointWriter writer_ ABSL_GUARDED_BY(write_mu_);
  // The last write's outcome until someone is told of it.
  absl::Status last_status_ ABSL_GUARDED_BY(write_mu_);
  // The last write's failure and the bytes it needed; OK and 0 after a
  // write that succeeded.
  absl::Status failure_ ABSL_GUARDED_BY(write_mu_);
  int64_t failed_bytes_ ABSL_GUARDED_BY(write_mu_) = 0;
  // Deltas: the step of the last streaming save that succeeded, which the
  // next may build on (-1: the next is full), and deltas since its full.
  int64_t chain_base_ ABSL_GUARDED_BY(write_mu_) = -1;
  uint32_t chain_base_crc_ ABSL_GUARDED_BY(write_mu_) = 0;  // its MANIFEST's
  int chain_deltas_ ABSL_GUARDED_BY(write_mu_) = 0;
  mutable absl::Mutex stats_mu_ ABSL_ACQUIRED_AFTER(write_mu_);
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_CHECKPOINTER_H_
