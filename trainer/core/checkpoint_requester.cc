#include "trainer/core/checkpoint_requester.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {

CheckpointRequester::CheckpointRequester(JobClient* client, int64_t every_steps,
                                         bool chief, TrainingObserver* observer,
                                         bool k_of_n)
    : client_(client),
      every_(chief ? every_steps : 0),
      observer_(observer),
      k_of_n_(k_of_n) {}

absl::Status CheckpointRequester::AskAhead(
    std::vector<std::string>* write_errors, int64_t* label) {
  absl::Status c;
  for (int t = 0; t < kTries; ++t) {
    ASSIGN_OR_RETURN(std::vector<GetStatusResponse> st, client_->Statuses());
    int64_t newest = *label;
    for (const GetStatusResponse& r : st) {
      newest = std::max(newest, r.max_version());
    }
    *label = newest + kLeadSteps * (t + 1);
    c = client_->Checkpoint(*label, write_errors);
    if (!absl::IsFailedPrecondition(c)) break;
    LOG(INFO) << "K of N: checkpoint of step " << *label << " asked too late ("
              << c.message() << "); asking further ahead";
  }
  return c;
}

void CheckpointRequester::Failed(int64_t n) {
  write_failures_ += n;
  if (observer_ != nullptr) observer_->CheckpointsFailed(n);
}

absl::Status CheckpointRequester::CheckPservers() {
  if (every_ <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<GetStatusResponse> st, client_->Statuses());
  for (size_t s = 0; s < st.size(); ++s) {
    if (!st[s].checkpoints_enabled()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--checkpoint_every_steps needs every pserver started with "
          "--checkpoint_dir; pserver ",
          client_->servers()[s]->address(), " has none"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointRequester::AtStep(int64_t step) {
  if (every_ <= 0 || step % every_ != 0 || step == last_) {
    return absl::OkStatus();
  }
  std::vector<std::string> write_errors;
  const int64_t due = step;
  absl::Status c = k_of_n_ ? AskAhead(&write_errors, &step)
                           : client_->Checkpoint(step, &write_errors);
  // A write that failed after its request was taken (a full or read-only
  // disk): said here, at the next request, so that it never goes unseen,
  // even when another pserver refused this one (those that took it have
  // started the next write already).
  if (!write_errors.empty()) Failed(static_cast<int64_t>(write_errors.size()));
  for (const std::string& e : write_errors) {
    LOG(ERROR) << "a checkpoint was not written: " << e
               << "; training goes on, and each --checkpoint_every_steps "
                  "asks again (the pserver's newest complete checkpoint "
                  "stays)";
  }
  if (absl::IsAborted(c)) return c;
  if (absl::IsResourceExhausted(c)) {
    Failed(1);
    no_room_ = true;
    LOG(ERROR) << "checkpoint of step " << step << " not taken: " << c
               << "; training goes on, and each --checkpoint_every_steps "
                  "asks again";
    return absl::OkStatus();
  }
  if (c.ok()) {
    if (no_room_) {
      LOG(INFO) << "checkpoint of step " << step
                << " taken: the pservers have room again";
    }
    no_room_ = false;
    last_ = due;
  } else {
    LOG(WARNING) << "checkpoint of step " << step << " failed: " << c;
  }
  return absl::OkStatus();
}

}  // namespace shardps
