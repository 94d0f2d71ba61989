#include "common/transport/ps_client_interface.h"

#include "glog/logging.h"

namespace shardps {

void PsClientInterface::PullDenseAsync(const PullRequest& req,
                                       const DensePullTargets* targets,
                                       PullResponse* resp,
                                       StatusCallback done) {
  PullAsync(
      req, resp,
      [this, &req, targets, resp, done = std::move(done)](absl::Status s) {
        if (s.ok()) s = TakeDensePull(address(), req, *resp, *targets);
        done(std::move(s));
      });
}

void PsClientInterface::PushDenseAsync(const DensePush& push,
                                       PushResponse* resp,
                                       StatusCallback done) {
  auto req = std::make_shared<const PushRequest>(ToPushRequest(push));
  PushAsync(*req, resp, [req, done = std::move(done)](absl::Status s) {
    done(std::move(s));
  });
}

}  // namespace shardps
