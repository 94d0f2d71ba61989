#include "common/transport/in_process_ps_client.h"

#include "base/job_id.h"
#include "glog/logging.h"

namespace shardps {

InProcessPsClient::InProcessPsClient(PsCallTarget* target, std::string address)
    : target_(target),
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
  DCHECK(req.GetDescriptor() == PsRpcMethod(rpc).input_type());
  DCHECK(resp->GetDescriptor() == PsRpcMethod(rpc).output_type());
  target_->Call(
      rpc, CallContext{std::string(kDefaultJobId), address_, nullptr, 0, ""},
      req, resp, [this, done = std::move(done)](absl::Status s) {
        Answer(done, std::move(s));
      });
}

}  // namespace shardps
