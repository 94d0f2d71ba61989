#include "trainer/client/heartbeat.h"

#include <thread>

#include "glog/logging.h"

namespace shardps {

struct Heartbeater::Call {
  HeartbeatRequest req;
  HeartbeatResponse resp;
};

Heartbeater::Heartbeater(std::vector<PsClientInterface*> servers,
                         int trainer_id, uint64_t incarnation,
                         absl::Duration interval)
    : servers_(std::move(servers)),
      trainer_id_(trainer_id),
      incarnation_(incarnation),
      interval_(interval),
      busy_(servers_.size(), false) {}

Heartbeater::~Heartbeater() { Stop(); }

void Heartbeater::Start() {
  thread_ = std::make_unique<std::thread>([this] {
    do {
      Beat();
    } while (!stop_.WaitForNotificationWithTimeout(interval_));
  });
}

void Heartbeater::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopped_ = true;
  }
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_ != nullptr && thread_->joinable()) thread_->join();
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

absl::Status Heartbeater::status() const {
  absl::MutexLock l(&mu_);
  return status_;
}

void Heartbeater::Beat() {
  for (size_t s = 0; s < servers_.size(); ++s) {
    {
      absl::MutexLock l(&mu_);
      if (stopped_) return;
      if (busy_[s]) continue;  // the last one is still being retried
      busy_[s] = true;
      ++in_flight_;
    }
    auto call = std::make_shared<Call>();
    call->req.set_trainer_id(trainer_id_);
    call->req.set_incarnation(incarnation_);
    servers_[s]->HeartbeatAsync(
        call->req, &call->resp, [this, s, call](absl::Status st) {
          absl::MutexLock l(&mu_);
          busy_[s] = false;
          --in_flight_;
          if (st.code() == absl::StatusCode::kFailedPrecondition &&
              status_.ok()) {
            LOG(ERROR) << "heartbeat: " << st.message();
            status_ = st;
          }
        });
  }
}

}  // namespace shardps
