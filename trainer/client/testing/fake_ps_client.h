// A PsClientInterface for tests whose every call answers UNIMPLEMENTED at
// once, on the caller's thread; a test overrides the calls it needs. Tests
// that need a real pserver use InProcessPsClient instead.
#ifndef SHARDPS_TRAINER_CLIENT_TESTING_FAKE_PS_CLIENT_H_
#define SHARDPS_TRAINER_CLIENT_TESTING_FAKE_PS_CLIENT_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "trainer/client/ps_client_interface.h"

namespace shardps {
namespace testing {

class FakePsClient : public PsClientInterface {
 public:
  explicit FakePsClient(std::string address = "fake")
      : address_(std::move(address)) {}

  const std::string& address() const override { return address_; }

  void InitJobAsync(const InitJobRequest&, InitJobResponse*,
                    StatusCallback done) override {
    done(Unimplemented("InitJob"));
  }
  void SetInitialValuesAsync(const SetInitialValuesRequest&,
                             SetInitialValuesResponse*,
                             StatusCallback done) override {
    done(Unimplemented("SetInitialValues"));
  }
  void CommitInitAsync(const CommitInitRequest&, CommitInitResponse*,
                       StatusCallback done) override {
    done(Unimplemented("CommitInit"));
  }
  void RegisterAsync(const RegisterRequest&, RegisterResponse*,
                     StatusCallback done) override {
    done(Unimplemented("Register"));
  }
  void GetStatusAsync(const GetStatusRequest&, GetStatusResponse*,
                      StatusCallback done) override {
    done(Unimplemented("GetStatus"));
  }
  void PullAsync(const PullRequest&, PullResponse*,
                 StatusCallback done) override {
    done(Unimplemented("Pull"));
  }
  void PushAsync(const PushRequest&, PushResponse*,
                 StatusCallback done) override {
    done(Unimplemented("Push"));
  }
  void HeartbeatAsync(const HeartbeatRequest&, HeartbeatResponse*,
                      StatusCallback done) override {
    done(Unimplemented("Heartbeat"));
  }
  void LeaveAsync(const LeaveRequest&, LeaveResponse*,
                  StatusCallback done) override {
    done(Unimplemented("Leave"));
  }
  void CheckpointAsync(const CheckpointRequest&, CheckpointResponse*,
                       StatusCallback done) override {
    done(Unimplemented("Checkpoint"));
  }
  void RollbackAsync(const RollbackRequest&, RollbackResponse*,
                     StatusCallback done) override {
    done(Unimplemented("Rollback"));
  }

 private:
  absl::Status Unimplemented(const char* call) const {
    return absl::UnimplementedError(std::string(call) +
                                    " is not implemented by fake " + address_);
  }
  const std::string address_;
};

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_TRAINER_CLIENT_TESTING_FAKE_PS_CLIENT_H_
