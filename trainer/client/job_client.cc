#include "trainer/client/job_client.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "common/placement/shard_map.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "trainer/client/transfer.h"

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

absl::Status JobClient::Leave() {
  std::vector<LeaveRequest> reqs(servers_.size());
  std::vector<LeaveResponse> resps(servers_.size());
  return OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_incarnation(stamp_->incarnation());
    servers_[s]->LeaveAsync(reqs[s], &resps[s], std::move(done));
  });
}

absl::Status JobClient::Checkpoint(int64_t step,
                                   std::vector<std::string>* write_errors) {
  std::vector<CheckpointRequest> reqs(servers_.size());
  std::vector<CheckpointResponse> resps(servers_.size());
  const absl::Status status = OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_step(step);
    reqs[s].set_generation(stamp_->generation());
    servers_[s]->CheckpointAsync(reqs[s], &resps[s], std::move(done));
  });
  if (write_errors != nullptr) {
    for (size_t i = 0; i < resps.size(); ++i) {
      if (resps[i].previous_write_error().empty()) continue;
      write_errors->push_back(absl::StrCat("pserver ", servers_[i]->address(),
                                           ": ",
                                           resps[i].previous_write_error()));
    }
  }
  return status;
}

absl::StatusOr<JobClient::SparseRows> JobClient::ReadSparseTable(
    uint32_t table_id, int64_t min_version) {
  SparseRows read;
  for (PsClientInterface* server : servers_) {
    ExportRowsRequest req;
    req.set_trainer_id(stamp_->trainer_id());
    req.set_generation(stamp_->generation());
    req.set_table_id(table_id);
    req.set_max_rows(65536);
    req.set_min_version(min_version);
    do {
      ExportRowsResponse resp;
      if (absl::Status s = server->ExportRows(req, &resp); !s.ok()) {
        return absl::Status(
            s.code(),
            absl::StrCat("pserver ", server->address(), ": ", s.message()));
      }
      const size_t n = static_cast<size_t>(resp.keys_size());
      if (resp.dim() <= 0 || (read.dim != 0 && resp.dim() != read.dim) ||
          resp.values().size() != n * resp.dim() * sizeof(float)) {
        return absl::DataLossError(
            absl::StrCat("pserver ", server->address(),
                         ": ExportRows answered ", n, " keys, dim ", resp.dim(),
                         " and ", resp.values().size(), " bytes of values"));
      }
      read.dim = resp.dim();
      read.keys.insert(read.keys.end(), resp.keys().begin(), resp.keys().end());
      const size_t at = read.values.size();
      read.values.resize(at + n * read.dim);
      std::memcpy(read.values.data() + at, resp.values().data(),
                  resp.values().size());
      req.set_cursor(resp.next_cursor());
    } while (req.cursor() != 0);
  }
  // Ascending, each key once.
  // size_t: a table may hold more than 2^32 rows.
  std::vector<size_t> order(read.keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return read.keys[a] < read.keys[b];
  });
  SparseRows out;
  out.dim = read.dim;
  for (size_t i : order) {
    if (!out.keys.empty() && out.keys.back() == read.keys[i]) continue;
    out.keys.push_back(read.keys[i]);
    const float* row = read.values.data() + i * read.dim;
    out.values.insert(out.values.end(), row, row + read.dim);
  }
  return out;
}

absl::StatusOr<std::vector<GetStatusResponse>> JobClient::Statuses() {
  std::vector<GetStatusRequest> reqs(servers_.size());
  std::vector<GetStatusResponse> resps(servers_.size());
  RETURN_IF_ERROR(OnLiveServers([&](size_t s, StatusCallback done) {
    servers_[s]->GetStatusAsync(reqs[s], &resps[s], std::move(done));
  }));
  return resps;
}

namespace {

// FinishAndWait's calls and what they learnt: a call may outlive the wait
// (a pserver gone is retried by its client until --rpc_retry_s, or until
// the client is destroyed), so all of it is shared with the callbacks.
struct FinishedPoll {
  FinishedPoll(size_t servers, int trainers)
      : leave(servers),
        left(servers),
        reqs(servers),
        resps(servers),
        told(servers, false),
        in_flight(servers, false),
        finished(trainers, false) {}
  bool AllFinished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return std::all_of(finished.begin(), finished.end(),
                       [](bool f) { return f; });
  }
  bool Settled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AllFinished() || std::none_of(in_flight.begin(), in_flight.end(),
                                         [](bool f) { return f; });
  }

  absl::Mutex mu;
  // One slot per pserver, stable; a response is written by its call in
  // flight only.
  std::vector<LeaveRequest> leave;
  std::vector<LeaveResponse> left;
  std::vector<GetStatusRequest> reqs;
  std::vector<GetStatusResponse> resps;
  std::vector<bool> told ABSL_GUARDED_BY(mu);  // the Leave was answered OK
  std::vector<bool> in_flight ABSL_GUARDED_BY(mu);
  std::vector<bool> finished ABSL_GUARDED_BY(mu);
  std::string unanswered ABSL_GUARDED_BY(mu);  // the last failure, if any
};

// Pserver s, unless its last call is still unanswered (one that has
// stopped, its trainer finished and its pod gone, must not hold the wait
// up): first that this trainer has finished, then who else has.
void AskOne(const std::shared_ptr<FinishedPoll>& state, size_t s,
            PsClientInterface* server, const RequestStamp& stamp) {
  FinishedPoll& st = *state;
  bool told;
  {
    absl::MutexLock l(&st.mu);
    if (st.in_flight[s]) return;
    st.in_flight[s] = true;
    told = st.told[s];
  }
  auto answered = [state, s, told,
                   address = server->address()](absl::Status status) {
    FinishedPoll& p = *state;
    absl::MutexLock l(&p.mu);
    p.in_flight[s] = false;
    if (!status.ok()) {
      p.unanswered = absl::StrCat("; pserver ", address,
                                  " did not answer: ", status.message());
    } else if (!told) {
      p.told[s] = true;
    } else {
      for (int k : p.resps[s].finished_trainers()) {
        if (k >= 0 && k < static_cast<int>(p.finished.size())) {
          p.finished[k] = true;
        }
      }
    }
  };
  if (!told) {
    st.leave[s].set_trainer_id(stamp.trainer_id());
    st.leave[s].set_incarnation(stamp.incarnation());
    st.leave[s].set_finished(true);
    server->LeaveAsync(st.leave[s], &st.left[s], std::move(answered));
  } else {
    st.resps[s].Clear();
    server->GetStatusAsync(st.reqs[s], &st.resps[s], std::move(answered));
  }
}

}  // namespace

absl::Status JobClient::FinishAndWait(int num_trainers, absl::Duration timeout,
                                      const std::atomic<bool>* stop,
                                      absl::Duration poll) {
  const absl::Time start = absl::Now();
  absl::Time last_log = start;
  auto state = std::make_shared<FinishedPoll>(servers_.size(), num_trainers);
  FinishedPoll& st = *state;
  {
    absl::MutexLock l(&st.mu);
    st.finished[stamp_->trainer_id()] = true;
  }
  while (true) {
    for (size_t s = 0; s < servers_.size(); ++s) {
      if (live_ && !live_(static_cast<int>(s))) continue;
      AskOne(state, s, servers_[s], *stamp_);
    }
    const absl::Time round_end = absl::Now() + poll;
    std::vector<int> waiting;
    std::string unanswered;
    {
      absl::MutexLock l(&st.mu);
      st.mu.AwaitWithDeadline(absl::Condition(&st, &FinishedPoll::Settled),
                              round_end);
      if (st.AllFinished()) return absl::OkStatus();
      for (int k = 0; k < num_trainers; ++k) {
        if (!st.finished[k]) waiting.push_back(k);
      }
      unanswered = st.unanswered;
    }
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
    if (now < round_end) absl::SleepFor(round_end - now);
  }
}

absl::Status JobClient::Rollback(int64_t step, uint64_t generation) {
  std::vector<RollbackRequest> reqs(servers_.size());
  std::vector<RollbackResponse> resps(servers_.size());
  return OnLiveServers([&](size_t s, StatusCallback done) {
    reqs[s].set_trainer_id(stamp_->trainer_id());
    reqs[s].set_incarnation(stamp_->incarnation());
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
  }
  // Where this pserver stands: it checks the placement against the
  // checkpoint it was restored from, and reshards one (--restore_from).
  req.set_server_index(static_cast<int>(s));
  req.set_num_servers(static_cast<int>(servers_.size()));
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
