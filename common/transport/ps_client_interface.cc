#include "common/transport/ps_client_interface.h"

#include "glog/logging.h"

namespace shardps {

void PsClientInterface::PushDenseAsync(const DensePush& push,
                                       PushResponse* resp,
                                       StatusCallback done) {
  auto req = std::make_shared<const PushRequest>(ToPushRequest(push));
  PushAsync(*req, resp, [req, done = std::move(done)](absl::Status s) {
    done(std::move(s));
  });
}

}  // namespace shardps
