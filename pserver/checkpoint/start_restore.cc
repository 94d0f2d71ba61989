#include "pserver/checkpoint/start_restore.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "pserver/checkpoint/job_checkpoint.h"
#include "pserver/checkpoint/reshard.h"
#include "pserver/checkpoint/store_snapshots.h"

namespace shardps {

void StartRestore::Configure(Env* env, std::string root, std::string job_id,
                             int64_t step) {
  absl::MutexLock l(&mu_);
  env_ = env;
  root_ = std::move(root);
  job_id_ = std::move(job_id);
  step_ = step;
}

namespace {

// FAILED_PRECONDITION, prefixed `where`, unless a restore from `root` can
// start with the chief's `req`: it says which pserver this is, and the
// pserver's own `checkpointer` (null: none) writes outside `root`.
absl::Status CheckCanRestore(const InitJobRequest& req,
                             const Checkpointer* checkpointer,
                             const std::string& root,
                             const std::string& where) {
  if (req.num_servers() <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        ": the chief's InitJob does not say which pserver this is "
        "(a trainer older than this pserver); start the trainers of this "
        "build"));
  }
  if (checkpointer != nullptr &&
      absl::StartsWith(checkpointer->dir() + "/",
                       std::string(absl::StripSuffix(root, "/")) + "/")) {
    // Its own checkpoint of the step would replace a shard of the one being
    // read, while the other pservers read it.
    return absl::FailedPreconditionError(
        absl::StrCat(where, " holds this pserver's own --checkpoint_dir (",
                     checkpointer->dir(),
                     "); give the pservers new checkpoint folders "
                     "outside the one they restore from"));
  }
  return absl::OkStatus();
}

// FAILED_PRECONDITION, prefixed `where` and naming the first difference,
// when checkpoint `from` holds another job spec than the chief's `req`.
absl::Status CheckSameJob(const InitJobRequest& req, const JobCheckpoint& from,
                          const std::string& where) {
  std::string difference;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&difference);
  if (!differ.Compare(req.job(), from.shards[0].info.job())) {
    difference = difference.substr(0, difference.find('\n'));
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the checkpoint of step ", from.step,
                     " holds another job than the chief's (", difference,
                     "; the checkpoint's value comes second)"));
  }
  return absl::OkStatus();
}

// The generation a restore of a checkpoint of generation `found` starts:
// one past it, or past the one `checkpointer` (null: none) kept, whichever
// is newer; written to the checkpointer's folder.
absl::StatusOr<uint64_t> NextGeneration(Checkpointer* checkpointer,
                                        uint64_t found) {
  uint64_t generation = found;
  if (checkpointer != nullptr) {
    auto kept = checkpointer->ReadGeneration();
    if (kept.ok()) {
      generation = std::max(generation, *kept);
    } else if (!absl::IsNotFound(kept.status())) {
      return kept.status();
    }
  }
  ++generation;
  if (checkpointer != nullptr) {
    RETURN_IF_ERROR(checkpointer->WriteGeneration(generation));
  }
  return generation;
}

}  // namespace

absl::Status StartRestore::BeforeInitJob(const InitJobRequest& req) {
  absl::MutexLock l(&mu_);
  if (root_.empty() || store_->ready()) return absl::OkStatus();
  const std::string where = absl::StrCat("--restore_from=", root_);
  RETURN_IF_ERROR(CheckCanRestore(req, checkpointer_, root_, where));
  const absl::Time t0 = absl::Now();
  auto from = FindJobCheckpoint(env_, root_, job_id_, step_);
  if (!from.ok()) {
    return absl::Status(from.status().code(),
                        absl::StrCat(where, ": ", from.status().message()));
  }
  RETURN_IF_ERROR(CheckSameJob(req, *from, where));
  auto progress = [](absl::string_view line) { LOG(INFO) << line; };
  ASSIGN_OR_RETURN(StoreSnapshot snap,
                   ReshardShard(env_, *from, req.server_index(),
                                req.num_servers(), progress));
  ASSIGN_OR_RETURN(const uint64_t generation,
                   NextGeneration(checkpointer_, from->generation));
  RETURN_IF_ERROR(StoreSnapshots(store_).Restore(snap, generation));
  LOG(WARNING) << "job " << job_id_ << ": restored step " << from->step
               << " as pserver " << req.server_index() << " of "
               << req.num_servers() << " from the checkpoint of "
               << from->num_servers << " pserver(s) under " << root_ << " in "
               << absl::FormatDuration(
                      absl::Trunc(absl::Now() - t0, absl::Milliseconds(1)));
  if (checkpointer_ != nullptr) {
    // This pserver's own copy, so that a restart, or a rollback to this
    // step, finds it in --checkpoint_dir.
    snap.info.set_generation(generation);
    RETURN_IF_ERROR(checkpointer_->Save(std::move(snap)));
  }
  return absl::OkStatus();
}

}  // namespace shardps
