#include "trainer/client/in_process_ps_client.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {
namespace {

// The message a typed call passed as its base (PsClientInterface::CallAsync
// promises the type).
template <typename T>
const T& Cast(const google::protobuf::Message& m) {
  DCHECK(m.GetDescriptor() == T::descriptor());
  return static_cast<const T&>(m);
}
template <typename T>
T* Cast(google::protobuf::Message* m) {
  DCHECK(m->GetDescriptor() == T::descriptor());
  return static_cast<T*>(m);
}

}  // namespace

InProcessPsClient::InProcessPsClient(RequestHandler* handler,
                                     std::string address)
    : handler_(handler),
      address_(std::move(address)),
      thread_([this] { Loop(); }) {}

InProcessPsClient::~InProcessPsClient() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void InProcessPsClient::Answer(StatusCallback done, absl::Status status) {
  absl::MutexLock l(&mu_);
  answers_.emplace_back(std::move(done), std::move(status));
}

void InProcessPsClient::Loop() {
  while (true) {
    std::pair<StatusCallback, absl::Status> next;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](InProcessPsClient* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return c->stop_ || !c->answers_.empty();
          },
          this));
      if (answers_.empty()) return;  // stopped, nothing left
      next = std::move(answers_.front());
      answers_.pop_front();
    }
    next.first(std::move(next.second));
  }
}

void InProcessPsClient::CallAsync(PsRpc rpc,
                                  const google::protobuf::Message& req,
                                  google::protobuf::Message* resp,
                                  StatusCallback done) {
  if (rpc == PsRpc::kPull) {  // the one call the handler may answer later
    handler_->Pull(Cast<PullRequest>(req), Cast<PullResponse>(resp),
                   [this, done = std::move(done)](absl::Status s) {
                     Answer(done, std::move(s));
                   });
    return;
  }
  Answer(std::move(done), Serve(rpc, req, resp));
}

absl::Status InProcessPsClient::Serve(PsRpc rpc,
                                      const google::protobuf::Message& req,
                                      google::protobuf::Message* resp) {
  RequestHandler& h = *handler_;
  switch (rpc) {
    case PsRpc::kInitJob:
      return h.InitJob(Cast<InitJobRequest>(req), Cast<InitJobResponse>(resp));
    case PsRpc::kSetInitialValues:
      return h.SetInitialValues(Cast<SetInitialValuesRequest>(req),
                                Cast<SetInitialValuesResponse>(resp));
    case PsRpc::kCommitInit:
      return h.CommitInit(Cast<CommitInitRequest>(req),
                          Cast<CommitInitResponse>(resp));
    case PsRpc::kRegister:
      return h.Register(Cast<RegisterRequest>(req),
                        Cast<RegisterResponse>(resp), address_);
    case PsRpc::kGetStatus:
      return h.GetStatus(Cast<GetStatusRequest>(req),
                         Cast<GetStatusResponse>(resp));
    case PsRpc::kPush:
      return h.Push(Cast<PushRequest>(req), Cast<PushResponse>(resp));
    case PsRpc::kHeartbeat:
      return h.Heartbeat(Cast<HeartbeatRequest>(req),
                         Cast<HeartbeatResponse>(resp));
    case PsRpc::kLeave:
      return h.Leave(Cast<LeaveRequest>(req), Cast<LeaveResponse>(resp));
    case PsRpc::kCheckpoint:
      return h.Checkpoint(Cast<CheckpointRequest>(req),
                          Cast<CheckpointResponse>(resp));
    case PsRpc::kRollback:
      return h.Rollback(Cast<RollbackRequest>(req),
                        Cast<RollbackResponse>(resp));
    case PsRpc::kPull:
      break;
  }
  return absl::InternalError(absl::StrCat(
      "in-process client cannot serve call ", static_cast<int>(rpc)));
}

}  // namespace shardps
