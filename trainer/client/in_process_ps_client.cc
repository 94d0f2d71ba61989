#include "trainer/client/in_process_ps_client.h"

namespace shardps {

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

void InProcessPsClient::InitJobAsync(const InitJobRequest& req,
                                     InitJobResponse* resp,
                                     StatusCallback done) {
  Answer(std::move(done), handler_->InitJob(req, resp));
}

void InProcessPsClient::SetInitialValuesAsync(
    const SetInitialValuesRequest& req, SetInitialValuesResponse* resp,
    StatusCallback done) {
  Answer(std::move(done), handler_->SetInitialValues(req, resp));
}

void InProcessPsClient::CommitInitAsync(const CommitInitRequest& req,
                                        CommitInitResponse* resp,
                                        StatusCallback done) {
  Answer(std::move(done), handler_->CommitInit(req, resp));
}

void InProcessPsClient::RegisterAsync(const RegisterRequest& req,
                                      RegisterResponse* resp,
                                      StatusCallback done) {
  Answer(std::move(done), handler_->Register(req, resp, address_));
}

void InProcessPsClient::GetStatusAsync(const GetStatusRequest& req,
                                       GetStatusResponse* resp,
                                       StatusCallback done) {
  Answer(std::move(done), handler_->GetStatus(req, resp));
}

void InProcessPsClient::PullAsync(const PullRequest& req, PullResponse* resp,
                                  StatusCallback done) {
  handler_->Pull(req, resp, [this, done = std::move(done)](absl::Status s) {
    Answer(done, std::move(s));
  });
}

void InProcessPsClient::PushAsync(const PushRequest& req, PushResponse* resp,
                                  StatusCallback done) {
  Answer(std::move(done), handler_->Push(req, resp));
}

void InProcessPsClient::HeartbeatAsync(const HeartbeatRequest& req,
                                       HeartbeatResponse* resp,
                                       StatusCallback done) {
  Answer(std::move(done), handler_->Heartbeat(req, resp));
}

void InProcessPsClient::LeaveAsync(const LeaveRequest& req, LeaveResponse* resp,
                                   StatusCallback done) {
  Answer(std::move(done), handler_->Leave(req, resp));
}

void InProcessPsClient::CheckpointAsync(const CheckpointRequest& req,
                                        CheckpointResponse* resp,
                                        StatusCallback done) {
  Answer(std::move(done), handler_->Checkpoint(req, resp));
}

void InProcessPsClient::RollbackAsync(const RollbackRequest& req,
                                      RollbackResponse* resp,
                                      StatusCallback done) {
  Answer(std::move(done), handler_->Rollback(req, resp));
}

}  // namespace shardps
