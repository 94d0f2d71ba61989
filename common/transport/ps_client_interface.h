#ifndef SHARDPS_COMMON_TRANSPORT_PS_CLIENT_INTERFACE_H_
#define SHARDPS_COMMON_TRANSPORT_PS_CLIENT_INTERFACE_H_

#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/transport/dense_pull.h"
#include "common/transport/dense_push.h"
#include "common/transport/ps_rpc.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "proto/ps_service.pb.h"

namespace shardps {

// StatusCallback, PsRpc and PsRpcMethod: common/transport/ps_rpc.h.

// A connection to one pserver. Each call is asynchronous: `done` runs once,
// on some other thread, when the call has ended; the request and response
// must stay alive until then. Transient failures (UNAVAILABLE,
// DEADLINE_EXCEEDED) are retried inside the implementation; the status that
// reaches `done` is final. Sync wrappers block until `done`.
//
// A transport implements CallAsync, the one entry point every typed call
// goes through; a wrapper (retries, credentials, fail-over) does the same.
// A test's fake may instead override the typed calls it answers.
// Implementations are thread-safe.
class PsClientInterface {
 public:
  virtual ~PsClientInterface() = default;

  // host:port, for messages.
  virtual const std::string& address() const = 0;

  // Ends the calls started before it, in flight or waiting to be retried,
  // as soon as it can, with CANCELLED; calls started after it go ahead. A
  // trainer that stops on an error calls it rather than wait for its other
  // calls' retries. The default does nothing, for clients whose calls end
  // by themselves without retrying (in-process, tests).
  virtual void CancelCalls() {}

  // Starts `rpc`. `req` and `resp` are its request and response messages
  // (PushRequest and PushResponse for kPush; PsRpcMethod names them): the
  // typed calls below guarantee it.
  virtual void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                         google::protobuf::Message* resp,
                         StatusCallback done) = 0;

  virtual void InitJobAsync(const InitJobRequest& req, InitJobResponse* resp,
                            StatusCallback done) {
    CallAsync(PsRpc::kInitJob, req, resp, std::move(done));
  }
  virtual void SetInitialValuesAsync(const SetInitialValuesRequest& req,
                                     SetInitialValuesResponse* resp,
                                     StatusCallback done) {
    CallAsync(PsRpc::kSetInitialValues, req, resp, std::move(done));
  }
  virtual void CommitInitAsync(const CommitInitRequest& req,
                               CommitInitResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kCommitInit, req, resp, std::move(done));
  }
  virtual void RegisterAsync(const RegisterRequest& req, RegisterResponse* resp,
                             StatusCallback done) {
    CallAsync(PsRpc::kRegister, req, resp, std::move(done));
  }
  virtual void GetStatusAsync(const GetStatusRequest& req,
                              GetStatusResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kGetStatus, req, resp, std::move(done));
  }
  virtual void PullAsync(const PullRequest& req, PullResponse* resp,
                         StatusCallback done) {
    CallAsync(PsRpc::kPull, req, resp, std::move(done));
  }
  // A dense pull whose values go to `targets` (which must stay alive until
  // `done` runs), checked against `req` (TakeDensePull: DATA_LOSS for a
  // reply that does not match it). A transport that can move them there
  // itself does (SharedMemoryPsClient); this default decodes the reply's
  // bytes.
  virtual void PullDenseAsync(const PullRequest& req,
                              const DensePullTargets* targets,
                              PullResponse* resp, StatusCallback done);
  virtual void PushAsync(const PushRequest& req, PushResponse* resp,
                         StatusCallback done) {
    CallAsync(PsRpc::kPush, req, resp, std::move(done));
  }
  // A dense push whose values stay where `push` points until `done` runs. A
  // transport that can send them from there does (GrpcPsClient); this
  // default copies them into a PushRequest for PushAsync.
  virtual void PushDenseAsync(const DensePush& push, PushResponse* resp,
                              StatusCallback done);
  virtual void HeartbeatAsync(const HeartbeatRequest& req,
                              HeartbeatResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kHeartbeat, req, resp, std::move(done));
  }
  virtual void LeaveAsync(const LeaveRequest& req, LeaveResponse* resp,
                          StatusCallback done) {
    CallAsync(PsRpc::kLeave, req, resp, std::move(done));
  }
  virtual void CheckpointAsync(const CheckpointRequest& req,
                               CheckpointResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kCheckpoint, req, resp, std::move(done));
  }
  virtual void RollbackAsync(const RollbackRequest& req, RollbackResponse* resp,
                             StatusCallback done) {
    CallAsync(PsRpc::kRollback, req, resp, std::move(done));
  }
  virtual void OpenSharedMemoryAsync(const SharedMemoryRequest& req,
                                     SharedMemoryResponse* resp,
                                     StatusCallback done) {
    CallAsync(PsRpc::kOpenSharedMemory, req, resp, std::move(done));
  }
  virtual void OpenTcpLaneAsync(const TcpLaneRequest& req,
                                TcpLaneResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kOpenTcpLane, req, resp, std::move(done));
  }

  virtual void ExportRowsAsync(const ExportRowsRequest& req,
                               ExportRowsResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kExportRows, req, resp, std::move(done));
  }

  virtual void ChangeViewAsync(const ChangeViewRequest& req,
                               ChangeViewResponse* resp, StatusCallback done) {
    CallAsync(PsRpc::kChangeView, req, resp, std::move(done));
  }

  absl::Status ChangeView(const ChangeViewRequest& req,
                          ChangeViewResponse* resp) {
    return CallAndWait(&PsClientInterface::ChangeViewAsync, req, resp);
  }
  absl::Status ExportRows(const ExportRowsRequest& req,
                          ExportRowsResponse* resp) {
    return CallAndWait(&PsClientInterface::ExportRowsAsync, req, resp);
  }
  absl::Status InitJob(const InitJobRequest& req, InitJobResponse* resp) {
    return CallAndWait(&PsClientInterface::InitJobAsync, req, resp);
  }
  absl::Status SetInitialValues(const SetInitialValuesRequest& req,
                                SetInitialValuesResponse* resp) {
    return CallAndWait(&PsClientInterface::SetInitialValuesAsync, req, resp);
  }
  absl::Status CommitInit(const CommitInitRequest& req,
                          CommitInitResponse* resp) {
    return CallAndWait(&PsClientInterface::CommitInitAsync, req, resp);
  }
  absl::Status Register(const RegisterRequest& req, RegisterResponse* resp) {
    return CallAndWait(&PsClientInterface::RegisterAsync, req, resp);
  }
  absl::Status GetStatus(const GetStatusRequest& req, GetStatusResponse* resp) {
    return CallAndWait(&PsClientInterface::GetStatusAsync, req, resp);
  }
  absl::Status Pull(const PullRequest& req, PullResponse* resp) {
    return CallAndWait(&PsClientInterface::PullAsync, req, resp);
  }
  absl::Status Push(const PushRequest& req, PushResponse* resp) {
    return CallAndWait(&PsClientInterface::PushAsync, req, resp);
  }
  absl::Status Heartbeat(const HeartbeatRequest& req, HeartbeatResponse* resp) {
    return CallAndWait(&PsClientInterface::HeartbeatAsync, req, resp);
  }
  absl::Status Leave(const LeaveRequest& req, LeaveResponse* resp) {
    return CallAndWait(&PsClientInterface::LeaveAsync, req, resp);
  }
  absl::Status Checkpoint(const CheckpointRequest& req,
                          CheckpointResponse* resp) {
    return CallAndWait(&PsClientInterface::CheckpointAsync, req, resp);
  }
  absl::Status Rollback(const RollbackRequest& req, RollbackResponse* resp) {
    return CallAndWait(&PsClientInterface::RollbackAsync, req, resp);
  }
  absl::Status OpenSharedMemory(const SharedMemoryRequest& req,
                                SharedMemoryResponse* resp) {
    return CallAndWait(&PsClientInterface::OpenSharedMemoryAsync, req, resp);
  }
  absl::Status OpenTcpLane(const TcpLaneRequest& req, TcpLaneResponse* resp) {
    return CallAndWait(&PsClientInterface::OpenTcpLaneAsync, req, resp);
  }

 private:
  template <typename Req, typename Resp>
  absl::Status CallAndWait(void (PsClientInterface::*method)(const Req&, Resp*,
                                                             StatusCallback),
                           const Req& req, Resp* resp) {
    absl::Notification n;
    absl::Status status;
    (this->*method)(req, resp, [&](absl::Status s) {
      status = std::move(s);
      n.Notify();
    });
    n.WaitForNotification();
    return status;
  }
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_PS_CLIENT_INTERFACE_H_
