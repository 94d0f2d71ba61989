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
  RequestHandler& h = *handler_;
  absl::Status s = absl::InternalError(
      absl::StrCat("in-process client: unknown call ", static_cast<int>(rpc)));
  switch (rpc) {
    case PsRpc::kPull:  // the one call the handler may answer later
      h.Pull(Cast<PullRequest>(req), Cast<PullResponse>(resp),
             [this, done = std::move(done)](absl::Status st) {
               Answer(done, std::move(st));
             });
      return;
    case PsRpc::kInitJob:
      s = h.InitJob(Cast<InitJobRequest>(req), Cast<InitJobResponse>(resp));
      break;
    case PsRpc::kSetInitialValues:
      s = h.SetInitialValues(Cast<SetInitialValuesRequest>(req),
                             Cast<SetInitialValuesResponse>(resp));
      break;
    case PsRpc::kCommitInit:
      s = h.CommitInit(Cast<CommitInitRequest>(req),
                       Cast<CommitInitResponse>(resp));
      break;
    case PsRpc::kRegister:
      s = h.Register(Cast<RegisterRequest>(req), Cast<RegisterResponse>(resp),
                     address_);
      break;
    case PsRpc::kGetStatus:
      s = h.GetStatus(Cast<GetStatusRequest>(req),
                      Cast<GetStatusResponse>(resp));
      break;
    case PsRpc::kPush:
      s = h.Push(Cast<PushRequest>(req), Cast<PushResponse>(resp));
      break;
    case PsRpc::kHeartbeat:
      s = h.Heartbeat(Cast<HeartbeatRequest>(req),
                      Cast<HeartbeatResponse>(resp));
      break;
    case PsRpc::kLeave:
      s = h.Leave(Cast<LeaveRequest>(req), Cast<LeaveResponse>(resp));
      break;
    case PsRpc::kCheckpoint:
      s = h.Checkpoint(Cast<CheckpointRequest>(req),
                       Cast<CheckpointResponse>(resp));
      break;
    case PsRpc::kRollback:
      s = h.Rollback(Cast<RollbackRequest>(req), Cast<RollbackResponse>(resp));
      break;
    case PsRpc::kOpenSharedMemory:
      s = h.OpenSharedMemory(Cast<SharedMemoryRequest>(req),
                             Cast<SharedMemoryResponse>(resp));
      break;
    case PsRpc::kChangeView:
      s = h.ChangeView(Cast<ChangeViewRequest>(req),
                       Cast<ChangeViewResponse>(resp));
      break;
    case PsRpc::kForward:
      s = h.Forward(Cast<ForwardRequest>(req), Cast<ForwardResponse>(resp));
      break;
    case PsRpc::kViewPrepare:
      s = h.ViewPrepare(Cast<ViewPrepareRequest>(req),
                        Cast<ViewPrepareResponse>(resp));
      break;
    case PsRpc::kViewAccept:
      s = h.ViewAccept(Cast<ViewAcceptRequest>(req),
                       Cast<ViewAcceptResponse>(resp));
      break;
    case PsRpc::kViewCommit:
      s = h.ViewCommit(Cast<ViewCommitRequest>(req),
                       Cast<ViewCommitResponse>(resp));
      break;
    case PsRpc::kInstallUnit:
      s = h.InstallUnit(Cast<InstallUnitRequest>(req),
                        Cast<InstallUnitResponse>(resp));
      break;
  }
  Answer(std::move(done), std::move(s));
}

}  // namespace shardps
