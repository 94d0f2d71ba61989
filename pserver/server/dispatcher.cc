#include "pserver/server/dispatcher.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pserver/store/store_state.h"

namespace shardps {
namespace {

absl::Status PoolFull(PsRpc rpc) {
  return absl::ResourceExhaustedError(absl::StrCat(
      PsRpcMethod(rpc).name(),
      ": the pserver has 64 MiB of calls waiting for other pservers (a "
      "replicated job's pushes wait for their backups); retry"));
}

}  // namespace

Dispatcher::Dispatcher(JobDirectory* jobs, RpcMetrics* metrics)
    : jobs_(jobs), metrics_(metrics) {}

std::vector<std::string> Dispatcher::MethodNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kNumPsRpcs; ++i) {
    names.push_back(PsRpcMethod(static_cast<PsRpc>(i)).name());
  }
  return names;
}

absl::StatusOr<std::shared_ptr<RequestHandler>> Dispatcher::Job(
    const std::string& job_id, JobAccess access) const {
  if (!serving_.load()) {
    return absl::UnavailableError(
        "the pserver is starting (loading its checkpoints)");
  }
  return jobs_->Job(job_id, access);
}

namespace {

// Whether call `rpc` may make the job it names: its chief's InitJob, and
// the calls between pservers (which only pservers make, peer token).
JobAccess AccessOf(PsRpc rpc) {
  return rpc == PsRpc::kInitJob || static_cast<int>(rpc) >= kFirstReplicationRpc
             ? JobAccess::kMake
             : JobAccess::kIfKnown;
}

// Whether a job not made yet answers `rpc` as an empty one does: trainers
// ask whether the job is ready, register and heartbeat before the chief
// has made it.
bool AnsweredUnmade(PsRpc rpc) {
  return rpc == PsRpc::kGetStatus || rpc == PsRpc::kRegister ||
         rpc == PsRpc::kHeartbeat || rpc == PsRpc::kLeave;
}

}  // namespace

void Dispatcher::Record(PsRpc rpc, const absl::Status& s, absl::Time start,
                        size_t request_bytes,
                        const google::protobuf::Message* resp,
                        uint64_t reply_value_bytes) {
  if (metrics_ == nullptr) return;
  if (rpc == PsRpc::kPull && s.ok()) {
    metrics_->RecordPullWait(absl::Microseconds(
        static_cast<const PullResponse*>(resp)->wait_micros()));
  }
  metrics_->Record(
      PsRpcMethod(rpc).name(), s.code(), absl::Now() - start, request_bytes,
      s.ok() && resp != nullptr ? resp->ByteSizeLong() + reply_value_bytes : 0);
}

void Dispatcher::Refused(PsRpc rpc, const absl::Status& s,
                         size_t request_bytes) {
  Record(rpc, s, absl::Now(), request_bytes, nullptr);
}

BlockingPool* Dispatcher::PoolFor(const CallEntry& e,
                                  const RequestHandler& job) {
  switch (e.threads) {
    case CallThreads::kCaller:
      return nullptr;
    case CallThreads::kPoolIfReplicated:
      return job.replication().replicas() != nullptr ? &blocking_ : nullptr;
    case CallThreads::kPool:
      return &blocking_;
    case CallThreads::kPeerIfReplicated:
      return job.replication().replicas() != nullptr ? &peer_pool_ : nullptr;
  }
  return nullptr;
}

void Dispatcher::Call(PsRpc rpc, const CallContext& ctx,
                      const google::protobuf::Message& req,
                      google::protobuf::Message* resp, StatusCallback done) {
  const absl::Time start = absl::Now();
  const size_t request_bytes = metrics_ != nullptr ? req.ByteSizeLong() : 0;
  absl::StatusOr<std::shared_ptr<RequestHandler>> job;
  try {
    job = Job(ctx.job_id, AccessOf(rpc));
    if (absl::IsNotFound(job.status())) {
      // Not made: what an empty job would answer (a trainer's router takes
      // "not initialised" for a pserver restarted without the job).
      if (AnsweredUnmade(rpc)) {
        job = jobs_->Unmade();
      } else {
        job = NotReadyError();
      }
    }
  } catch (const std::bad_alloc&) {
    job = OutOfMemoryStatus();
  }
  if (!job.ok()) {
    Record(rpc, job.status(), start, request_bytes, nullptr);
    done(job.status());
    return;
  }
  const CallEntry& e = CallTableEntry(rpc);
  BlockingPool* pool = PoolFor(e, **job);
  if (pool == nullptr) {
    Run(e, *std::move(job), ctx, req, resp, std::move(done), start,
        request_bytes);
    return;
  }
  auto task = [this, &e, job = *job, ctx, &req, resp, done, start,
               request_bytes]() mutable {
    Run(e, std::move(job), ctx, req, resp, std::move(done), start,
        request_bytes);
  };
  if (!pool->TrySchedule(std::move(task), request_bytes > 0
                                              ? request_bytes
                                              : req.ByteSizeLong())) {
    Record(rpc, PoolFull(rpc), start, request_bytes, nullptr);
    done(PoolFull(rpc));
  }
}

void Dispatcher::CallOn(const std::shared_ptr<RequestHandler>& job, PsRpc rpc,
                        const CallContext& ctx,
                        const google::protobuf::Message& req,
                        google::protobuf::Message* resp, StatusCallback done) {
  // A push's values that came outside the message count as received.
  const uint64_t values = rpc == PsRpc::kPush ? ctx.value_bytes : 0;
  Run(CallTableEntry(rpc), job, ctx, req, resp, std::move(done), absl::Now(),
      metrics_ != nullptr ? req.ByteSizeLong() + values : 0);
}

void Dispatcher::Run(const CallEntry& e, std::shared_ptr<RequestHandler> job,
                     const CallContext& ctx,
                     const google::protobuf::Message& req,
                     google::protobuf::Message* resp, StatusCallback done,
                     absl::Time start, size_t request_bytes) {
  RequestHandler& h = *job;
  // The job stays until the call is answered (a pull may answer later).
  // A pull's values sent outside the reply count as sent.
  const uint64_t reply_values = e.rpc == PsRpc::kPull ? ctx.value_bytes : 0;
  e.run(h, ctx, req, resp,
        [this, rpc = e.rpc, job = std::move(job), resp, start, request_bytes,
         reply_values, done = std::move(done)](absl::Status s) {
          Record(rpc, s, start, request_bytes, resp, reply_values);
          done(std::move(s));
        });
}

}  // namespace shardps
