#include "pserver/service/call_table.h"

#include <array>
#include <new>
#include <utility>

#include "glog/logging.h"

namespace shardps {
namespace {

using google::protobuf::Message;

// A call that answers at once: RequestHandler::M on the typed messages.
template <typename Req, typename Resp,
          absl::Status (RequestHandler::*M)(const Req&, Resp*)>
void Unary(RequestHandler& h, const CallContext&, const Message& req,
           Message* resp, StatusCallback done) {
  DCHECK(req.GetDescriptor() == Req::descriptor());
  DCHECK(resp->GetDescriptor() == Resp::descriptor());
  absl::Status s;
  try {
    s = (h.*M)(static_cast<const Req&>(req), static_cast<Resp*>(resp));
  } catch (const std::bad_alloc&) {
    s = OutOfMemoryStatus();
  }
  done(std::move(s));
}

void RegisterCall(RequestHandler& h, const CallContext& ctx, const Message& req,
                  Message* resp, StatusCallback done) {
  absl::Status s;
  try {
    s = h.Register(static_cast<const RegisterRequest&>(req),
                   static_cast<RegisterResponse*>(resp), ctx.peer);
  } catch (const std::bad_alloc&) {
    s = OutOfMemoryStatus();
  }
  done(std::move(s));
}

// The one call a handler may answer later (RequestHandler::Pull catches
// its own failed allocations).
void PullCall(RequestHandler& h, const CallContext&, const Message& req,
              Message* resp, StatusCallback done) {
  h.Pull(static_cast<const PullRequest&>(req), static_cast<PullResponse*>(resp),
         std::move(done));
}

using RH = RequestHandler;
constexpr CallThreads kCaller = CallThreads::kCaller;
constexpr CallThreads kIfReplicated = CallThreads::kPoolIfReplicated;
constexpr CallThreads kPeer = CallThreads::kPeerIfReplicated;

// In the proto's order (CallTableEntry checks).
const std::array<CallEntry, kNumPsRpcs> kTable = {{
    {PsRpc::kInitJob, kIfReplicated,
     &Unary<InitJobRequest, InitJobResponse, &RH::InitJob>},
    {PsRpc::kSetInitialValues, kIfReplicated,
     &Unary<SetInitialValuesRequest, SetInitialValuesResponse,
            &RH::SetInitialValues>},
    {PsRpc::kCommitInit, kIfReplicated,
     &Unary<CommitInitRequest, CommitInitResponse, &RH::CommitInit>},
    {PsRpc::kRegister, kIfReplicated, &RegisterCall},
    {PsRpc::kGetStatus, kIfReplicated,
     &Unary<GetStatusRequest, GetStatusResponse, &RH::GetStatus>},
    {PsRpc::kPull, kIfReplicated, &PullCall},
    {PsRpc::kPush, kIfReplicated, &Unary<PushRequest, PushResponse, &RH::Push>},
    {PsRpc::kHeartbeat, kIfReplicated,
     &Unary<HeartbeatRequest, HeartbeatResponse, &RH::Heartbeat>},
    {PsRpc::kLeave, kIfReplicated,
     &Unary<LeaveRequest, LeaveResponse, &RH::Leave>},
    {PsRpc::kCheckpoint, kIfReplicated,
     &Unary<CheckpointRequest, CheckpointResponse, &RH::Checkpoint>},
    {PsRpc::kRollback, kIfReplicated,
     &Unary<RollbackRequest, RollbackResponse, &RH::Rollback>},
    {PsRpc::kOpenSharedMemory, kCaller,
     &Unary<SharedMemoryRequest, SharedMemoryResponse, &RH::OpenSharedMemory>},
    {PsRpc::kChangeView, CallThreads::kPool,
     &Unary<ChangeViewRequest, ChangeViewResponse, &RH::ChangeView>},
    {PsRpc::kForward, kPeer,
     &Unary<ForwardRequest, ForwardResponse, &RH::Forward>},
    {PsRpc::kViewPrepare, kPeer,
     &Unary<ViewPrepareRequest, ViewPrepareResponse, &RH::ViewPrepare>},
    {PsRpc::kViewAccept, kPeer,
     &Unary<ViewAcceptRequest, ViewAcceptResponse, &RH::ViewAccept>},
    {PsRpc::kViewCommit, kPeer,
     &Unary<ViewCommitRequest, ViewCommitResponse, &RH::ViewCommit>},
    {PsRpc::kInstallUnit, kPeer,
     &Unary<InstallUnitRequest, InstallUnitResponse, &RH::InstallUnit>},
}};

}  // namespace

absl::Status OutOfMemoryStatus() {
  return absl::ResourceExhaustedError(
      "the pserver is out of memory (see --max_memory_mb)");
}

const CallEntry& CallTableEntry(PsRpc rpc) {
  const int i = static_cast<int>(rpc);
  CHECK(i >= 0 && i < kNumPsRpcs) << "unknown PsRpc " << i;
  CHECK(kTable[i].rpc == rpc) << "the call table is out of order at " << i;
  return kTable[i];
}

void SingleJobTarget::Call(PsRpc rpc, const CallContext& ctx,
                           const google::protobuf::Message& req,
                           google::protobuf::Message* resp,
                           StatusCallback done) {
  CallTableEntry(rpc).run(*handler_, ctx, req, resp, std::move(done));
}

}  // namespace shardps
