#ifndef SHARDPS_COMMON_TRANSPORT_PS_CALLS_H_
#define SHARDPS_COMMON_TRANSPORT_PS_CALLS_H_

// The one list of calls. X(Name, Request, Response) for each method of the
// ParameterServer service (proto/ps_service.proto), then of the
// Replication service between pservers (proto/replication.proto), in the
// protos' order. Everything else is made from it: the PsRpc enum
// (ps_rpc.h), the typed client calls (ps_client_interface.h), the call
// table's entries (pserver/server/call_table.cc) and the gRPC binding
// (pserver/service/grpc_service.*). ps_rpc_test checks it against the
// services' descriptors, method by method. Adding a call: the proto, this
// list, the handler's method of the same name (docs/architecture.md,
// "Adding a call").

#define SHARDPS_PS_CALLS(X)                                              \
  X(InitJob, InitJobRequest, InitJobResponse)                            \
  X(SetInitialValues, SetInitialValuesRequest, SetInitialValuesResponse) \
  X(CommitInit, CommitInitRequest, CommitInitResponse)                   \
  X(Register, RegisterRequest, RegisterResponse)                         \
  X(GetStatus, GetStatusRequest, GetStatusResponse)                      \
  X(Pull, PullRequest, PullResponse)                                     \
  X(Push, PushRequest, PushResponse)                                     \
  X(Heartbeat, HeartbeatRequest, HeartbeatResponse)                      \
  X(Leave, LeaveRequest, LeaveResponse)                                  \
  X(Checkpoint, CheckpointRequest, CheckpointResponse)                   \
  X(Rollback, RollbackRequest, RollbackResponse)                         \
  X(OpenSharedMemory, SharedMemoryRequest, SharedMemoryResponse)         \
  X(ChangeView, ChangeViewRequest, ChangeViewResponse)                   \
  X(OpenTcpLane, TcpLaneRequest, TcpLaneResponse)                        \
  X(ExportRows, ExportRowsRequest, ExportRowsResponse)

#define SHARDPS_REPLICATION_CALLS(X)                      \
  X(Forward, ForwardRequest, ForwardResponse)             \
  X(ViewPrepare, ViewPrepareRequest, ViewPrepareResponse) \
  X(ViewAccept, ViewAcceptRequest, ViewAcceptResponse)    \
  X(ViewCommit, ViewCommitRequest, ViewCommitResponse)    \
  X(InstallUnit, InstallUnitRequest, InstallUnitResponse) \
  X(ViewInspect, ViewInspectRequest, ViewPrepareResponse)

#endif  // SHARDPS_COMMON_TRANSPORT_PS_CALLS_H_
