// A PsClientInterface for tests whose every call answers UNIMPLEMENTED at
// once, on the caller's thread; a test overrides the typed calls it needs
// (PushAsync, ...). Tests
// that need a real pserver use InProcessPsClient instead.
#ifndef SHARDPS_TRAINER_TRANSPORT_TESTING_FAKE_PS_CLIENT_H_
#define SHARDPS_TRAINER_TRANSPORT_TESTING_FAKE_PS_CLIENT_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/transport/ps_client_interface.h"

namespace shardps {
namespace testing {

class FakePsClient : public PsClientInterface {
 public:
  explicit FakePsClient(std::string address = "fake")
      : address_(std::move(address)) {}

  const std::string& address() const override { return address_; }

  // Every call the test does not override answers UNIMPLEMENTED.
  void CallAsync(PsRpc rpc, const google::protobuf::Message&,
                 google::protobuf::Message*, StatusCallback done) override {
    done(absl::UnimplementedError(absl::StrCat(
        PsRpcMethod(rpc).name(), " is not implemented by fake ", address_)));
  }

 private:
  const std::string address_;
};

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_TESTING_FAKE_PS_CLIENT_H_
