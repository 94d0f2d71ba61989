#include "trainer/client/job_client.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "trainer/client/fanout.h"

namespace shardps {

JobClient::JobClient(std::vector<PsClientInterface*> servers,
                     RequestStamp* stamp)
    : servers_(std::move(servers)), stamp_(stamp) {}

absl::Status JobClient::OnLiveServers(
    const std::function<void(size_t, StatusCallback)>& fn) {
  return OnEveryServer(servers_.size(), [&](size_t s, StatusCallback done) {
    if (live_ && !live_(static_cast<int>(s))) {
      done(absl::OkStatus());
      return;
    }
    fn(s, std::move(done));
  });
}

absl::Status JobClient::Register() {
  std::vector<RegisterRequest> reqs(servers_.size());
  std::vector<RegisterResponse> resps(servers_.size());
  return OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_incarnation(stamp_->incarnation());
    servers_[s]->RegisterAsync(reqs[s], &resps[s], std::move(done));
  });
}

absl::StatusOr<int64_t> JobClient::Join() {
  std::vector<RegisterRequest> reqs(servers_.size());
  std::vector<RegisterResponse> resps(servers_.size());
  RETURN_IF_ERROR(OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_incarnation(stamp_->incarnation());
    servers_[s]->RegisterAsync(reqs[s], &resps[s], std::move(done));
  }));
  int64_t start = 0;
  for (const RegisterResponse& r : resps) {
    start = std::max(start, r.join_step());
  }
  RETURN_IF_ERROR(OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_start_step(start);
    reqs[s].set_confirm(true);
    servers_[s]->RegisterAsync(reqs[s], &resps[s], std::move(done));
  }));
  return start;
}

absl::Status JobClient::Leave(bool finished) {
  std::vector<LeaveRequest> reqs(servers_.size());
  std::vector<LeaveResponse> resps(servers_.size());
  return OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_incarnation(stamp_->incarnation());
    reqs[s].set_finished(finished);
    servers_[s]->LeaveAsync(reqs[s], &resps[s], std::move(done));
  });
}

absl::Status JobClient::Checkpoint(int64_t step) {
  std::vector<CheckpointRequest> reqs(servers_.size());
  std::vector<CheckpointResponse> resps(servers_.size());
  return OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_step(step);
    reqs[s].set_generation(stamp_->generation());
    servers_[s]->CheckpointAsync(reqs[s], &resps[s], std::move(done));
  });
}

absl::StatusOr<std::vector<GetStatusResponse>> JobClient::Statuses() {
  std::vector<GetStatusRequest> reqs(servers_.size());
  std::vector<GetStatusResponse> resps(servers_.size());
  RETURN_IF_ERROR(OnLiveServers([&](size_t s, StatusCallback done) {
    servers_[s]->GetStatusAsync(reqs[s], &resps[s], std::move(done));
  }));
  return resps;
}

absl::Status JobClient::WaitForTrainers(int num_trainers,
                                        absl::Duration timeout,
                                        const std::atomic<bool>* stop,
                                        absl::Duration poll) {
  const absl::Time start = absl::Now();
  absl::Time last_log = start;
  std::vector<bool> finished(num_trainers, false);
  finished[stamp_->trainer_id()] = true;
  while (true) {
    std::string unanswered;
    for (size_t s = 0; s < servers_.size(); ++s) {
      if (live_ && !live_(static_cast<int>(s))) continue;
      GetStatusRequest req;
      GetStatusResponse resp;
      absl::Status st = servers_[s]->GetStatus(req, &resp);
      if (!st.ok()) {
        unanswered = absl::StrCat("; pserver ", servers_[s]->address(),
                                  " did not answer: ", st.message());
        continue;
      }
      for (int k : resp.finished_trainers()) {
        if (k >= 0 && k < num_trainers) finished[k] = true;
      }
    }
    std::vector<int> waiting;
    for (int k = 0; k < num_trainers; ++k) {
      if (!finished[k]) waiting.push_back(k);
    }
    if (waiting.empty()) return absl::OkStatus();
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(
          absl::StrCat("stopped by a signal while waiting for trainer(s) ",
                       absl::StrJoin(waiting, ", "), " to finish"));
    }
    const absl::Time now = absl::Now();
    if (now - start >= timeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          "trainer(s) ", absl::StrJoin(waiting, ", "),
          " had not finished after ", absl::FormatDuration(now - start),
          " (--wait_for_trainers_s)", unanswered));
    }
    if (now - last_log >= absl::Seconds(30)) {
      last_log = now;
      LOG(INFO) << "trainer " << stamp_->trainer_id()
                << " has finished and waits for trainer(s) "
                << absl::StrJoin(waiting, ", ")
                << " to finish too, so that the pservers stay up for them ("
                << absl::FormatDuration(now - start) << " so far, up to "
                << absl::FormatDuration(timeout) << ")" << unanswered;
    }
    absl::SleepFor(poll);
  }
}

absl::Status JobClient::Rollback(int64_t step, uint64_t generation) {
  std::vector<RollbackRequest> reqs(servers_.size());
  std::vector<RollbackResponse> resps(servers_.size());
  return OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_step(step);
    reqs[s].set_generation(generation);
    servers_[s]->RollbackAsync(reqs[s], &resps[s], std::move(done));
  });
}

InitJobRequest JobClient::InitRequest(
    size_t s, const JobSpec& job, const ChunkPlan& plan,
    std::vector<const std::vector<BlockPlacement>*>* chunks) const {
  InitJobRequest req;
  req.set_trainer_id(stamp_->trainer_id());
  *req.mutable_job() = job;
  // The shards this pserver holds: its own, and with replication those it
  // backs (common/placement/shard_map.h, ReplicaServers).
  for (size_t shard = 0; shard < servers_.size(); ++shard) {
    const std::vector<int> r =
        ReplicaServers(static_cast<int>(shard), std::max(1, replication_),
                       static_cast<int>(servers_.size()));
    if (std::find(r.begin(), r.end(), static_cast<int>(s)) == r.end()) {
      continue;
    }
    for (const auto& chunk : plan[shard]) chunks->push_back(&chunk);
  }
  for (const auto* chunk : *chunks) {
    for (const BlockPlacement& p : *chunk) {
      BlockRef* r = req.add_blocks();
      r->set_table_id(p.table_id);
      r->set_block(p.block);
    }
  }
  if (replication_ > 1) {
    for (const PsClientInterface* c : servers_) req.add_pservers(c->address());
    req.set_server_index(static_cast<int>(s));
  }
  return req;
}

absl::Status JobClient::Rejoin(size_t s, const JobSpec& job,
                               const ChunkPlan& plan) {
  std::vector<const std::vector<BlockPlacement>*> chunks;
  InitJobRequest req = InitRequest(s, job, plan, &chunks);
  req.set_rejoin(true);
  InitJobResponse resp;
  return servers_[s]->InitJob(req, &resp);
}

absl::Status JobClient::InitJob(
    const JobSpec& job, const ChunkPlan& plan,
    const std::vector<const float*>& initial_values) {
  for (size_t s = 0; s < servers_.size(); ++s) {
    PsClientInterface* server = servers_[s];
    std::vector<const std::vector<BlockPlacement>*> chunks;
    const InitJobRequest req = InitRequest(s, job, plan, &chunks);
    InitJobResponse resp;
    RETURN_IF_ERROR(server->InitJob(req, &resp));
    if (resp.already_ready()) {
      LOG(INFO) << "pserver " << server->address()
                << " already holds this job; keeping its values";
      continue;
    }
    for (const auto* chunk : chunks) {
      SetInitialValuesRequest vreq;
      vreq.set_trainer_id(stamp_->trainer_id());
      for (const BlockPlacement& p : *chunk) {
        DenseBlock* b = vreq.add_blocks();
        b->set_table_id(p.table_id);
        b->set_block(p.block);
        b->set_values(reinterpret_cast<const char*>(initial_values[p.table_id] +
                                                    p.offset),
                      p.size * sizeof(float));
      }
      SetInitialValuesResponse vresp;
      RETURN_IF_ERROR(server->SetInitialValues(vreq, &vresp));
    }
    CommitInitRequest creq;
    creq.set_trainer_id(stamp_->trainer_id());
    CommitInitResponse cresp;
    RETURN_IF_ERROR(server->CommitInit(creq, &cresp));
  }
  return absl::OkStatus();
}

absl::Status JobClient::WaitUntilReady(const JobSpec& expected,
                                       absl::Duration timeout) {
  const absl::Time start = absl::Now();
  absl::Time last_log = start;
  std::vector<bool> ready(servers_.size(), false);
  while (true) {
    std::vector<std::string> waiting;
    for (size_t s = 0; s < servers_.size(); ++s) {
      if (ready[s]) continue;
      GetStatusRequest req;
      GetStatusResponse resp;
      RETURN_IF_ERROR(servers_[s]->GetStatus(req, &resp));
      if (!resp.job_ready()) {
        waiting.push_back(servers_[s]->address());
        continue;
      }
      if (!google::protobuf::util::MessageDifferencer::Equals(resp.job(),
                                                              expected)) {
        std::string diff;
        google::protobuf::util::MessageDifferencer d;
        d.ReportDifferencesToString(&diff);
        d.Compare(expected, resp.job());
        return absl::FailedPreconditionError(absl::StrCat(
            "pserver ", servers_[s]->address(),
            " holds a job that differs from this trainer's config (the "
            "chief's config, mode, trainer count or batch size differ, or, "
            "with sparse_input.adapt_optimizer_to_data, the training data "
            "the optimizer settings were adapted to): ",
            diff.substr(0, 400)));
      }
      ready[s] = true;
    }
    if (waiting.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now - start > timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("the chief (trainer 0) has not initialised pserver(s) ",
                       absl::StrJoin(waiting, ", "), " after ",
                       absl::FormatDuration(now - start)));
    }
    if (now - last_log >= absl::Seconds(10)) {
      last_log = now;
      LOG(INFO) << "waiting for the chief (trainer 0) to initialise pserver(s) "
                << absl::StrJoin(waiting, ", ");
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

}  // namespace shardps
