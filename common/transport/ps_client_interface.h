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
// goes through; a wrapper (retries, credentials, fail-over) does the same,
// and a decorator of the dense calls forwards the rest
// (ForwardingPsClient). Implementations are thread-safe.
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

  // The typed calls, a pair for each name of the list (ps_calls.h):
  // NameAsync starts it through CallAsync (a test's fake may override it
  // instead), Name waits for it. PullAsync and PushAsync carry a pull's or
  // push's values in the messages; the dense calls below may move them
  // another way.
#define SHARDPS_TYPED_CALL(Name, Request, Response)                 \
  virtual void Name##Async(const Request& req, Response* resp,      \
                           StatusCallback done) {                   \
    CallAsync(PsRpc::k##Name, req, resp, std::move(done));          \
  }                                                                 \
  absl::Status Name(const Request& req, Response* resp) {           \
    return CallAndWait(&PsClientInterface::Name##Async, req, resp); \
  }
  SHARDPS_PS_CALLS(SHARDPS_TYPED_CALL)
#undef SHARDPS_TYPED_CALL

  // A dense pull whose values go to `targets` (which must stay alive until
  // `done` runs), checked against `req` (TakeDensePull: DATA_LOSS for a
  // reply that does not match it). A transport that can move them there
  // itself does (SharedMemoryPsClient); this default decodes the reply's
  // bytes.
  virtual void PullDenseAsync(const PullRequest& req,
                              const DensePullTargets* targets,
                              PullResponse* resp, StatusCallback done);
  // A dense push whose values stay where `push` points until `done` runs. A
  // transport that can send them from there does (GrpcPsClient); this
  // default copies them into a PushRequest for PushAsync.
  virtual void PushDenseAsync(const DensePush& push, PushResponse* resp,
                              StatusCallback done);

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

// A decorator's base: every call goes to `inner` as it is, and so do
// address() and CancelCalls(); a decorator overrides what it moves another
// way (the dense calls: SharedMemoryPsClient, TcpLanePsClient). `inner`
// must outlive it.
class ForwardingPsClient : public PsClientInterface {
 public:
  const std::string& address() const override { return inner_->address(); }
  void CancelCalls() override { inner_->CancelCalls(); }
  void CallAsync(PsRpc rpc, const google::protobuf::Message& req,
                 google::protobuf::Message* resp,
                 StatusCallback done) override {
    inner_->CallAsync(rpc, req, resp, std::move(done));
  }

 protected:
  explicit ForwardingPsClient(PsClientInterface* inner) : inner_(inner) {}

  PsClientInterface* const inner_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_PS_CLIENT_INTERFACE_H_
