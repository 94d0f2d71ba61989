#ifndef SHARDPS_PSERVER_CHECKPOINT_START_RESTORE_H_
#define SHARDPS_PSERVER_CHECKPOINT_START_RESTORE_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/storage/env.h"
#include "proto/ps_service.pb.h"
#include "pserver/checkpoint/checkpointer.h"
#include "pserver/store/parameter_store.h"

namespace shardps {

// A pserver's --restore_from: the job starts on this pserver from a job
// checkpoint written by any number of pservers (docs/fault_tolerance.md,
// "Restoring onto other pservers"). The chief's InitJob says where this
// pserver stands (its index and the pserver count); this pserver's share
// of the checkpoint is cut out of it then (ReshardShard), loaded as a new
// generation, and written to its own --checkpoint_dir, which later
// restarts load. Thread-safe.
class StartRestore {
 public:
  // `store` and `checkpointer` (null without --checkpoint_dir) must
  // outlive it.
  StartRestore(ParameterStore* store, Checkpointer* checkpointer)
      : store_(store), checkpointer_(checkpointer) {}

  // Before the first request: restore job `job_id` from the job
  // checkpoints under `root` (any layout SurveyJobCheckpoints reads), the
  // newest complete one, or that of `step` when >= 0. `env` must outlive
  // it.
  void Configure(Env* env, std::string root, std::string job_id,
                 int64_t step = -1);

  // Called with the chief's InitJob before the store sees it. Does nothing
  // when not configured or when the job is on this pserver already (from
  // its own --checkpoint_dir, or an earlier InitJob). Else: NOT_FOUND when
  // `root` holds no complete checkpoint of the job (saying what it holds);
  // FAILED_PRECONDITION when the InitJob does not say where this pserver
  // stands (a trainer older than --restore_from) or the checkpoint holds
  // another job spec than the chief's (naming the first difference); the
  // errors of ReshardShard and StoreSnapshots::Restore. On success the
  // store holds the job, ready, and the InitJob finds it so.
  absl::Status BeforeInitJob(const InitJobRequest& req);

 private:
  ParameterStore* const store_;
  Checkpointer* const checkpointer_;
  absl::Mutex mu_;  // one restore at a time
  Env* env_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string root_ ABSL_GUARDED_BY(mu_);
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace shardps

#endif  // SHARDPS_PSERVER_CHECKPOINT_START_RESTORE_H_
