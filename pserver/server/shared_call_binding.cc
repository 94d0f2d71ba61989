#include "pserver/server/shared_call_binding.h"

#include <new>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

// The request of a shared call (a PushRequest or a PullRequest), parsed
// and checked against the region it came through.
absl::Status ParseCall(absl::string_view bytes, int trainer_id,
                       uint64_t region_id, PsRpc rpc,
                       google::protobuf::Message* req) {
  if (!req->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "shared call: a request that does not parse");
  }
  int named_trainer = 0;
  uint64_t named_region = 0;
  if (rpc == PsRpc::kPush) {
    auto* push = static_cast<PushRequest*>(req);
    named_trainer = push->trainer_id();
    named_region = push->shared_region();
  } else {
    auto* pull = static_cast<PullRequest*>(req);
    named_trainer = pull->trainer_id();
    named_region = pull->shared_region();
  }
  if (named_trainer != trainer_id || named_region != region_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "shared call: trainer ", named_trainer, " and region ", named_region,
        " named through the region of trainer ", trainer_id));
  }
  return absl::OkStatus();
}

// The dispatch of the calls through region `region_id` of `trainer_id`:
// each is parsed, checked and handed to `dispatcher` for the handler of
// `job`, while that job lives.
SharedCallServer::Dispatch DispatchToJob(std::weak_ptr<RequestHandler> job,
                                         int trainer_id, uint64_t region_id,
                                         Dispatcher* dispatcher) {
  return [job, trainer_id, region_id, dispatcher](
             shared_calls::Method method, absl::string_view bytes,
             SharedCallServer::Reply reply) {
    const PsRpc rpc =
        method == shared_calls::kPush ? PsRpc::kPush : PsRpc::kPull;
    std::shared_ptr<RequestHandler> h = job.lock();
    if (h == nullptr) {
      reply(absl::NotFoundError("shared region: the job has ended here"),
            nullptr);
      return;
    }
    // The messages live until the reply has been written to the slot.
    std::shared_ptr<google::protobuf::Message> req, resp;
    if (rpc == PsRpc::kPush) {
      req = std::make_shared<PushRequest>();
      resp = std::make_shared<PushResponse>();
    } else {
      req = std::make_shared<PullRequest>();
      resp = std::make_shared<PullResponse>();
    }
    if (absl::Status s =
            ParseCall(bytes, trainer_id, region_id, rpc, req.get());
        !s.ok()) {
      dispatcher->Refused(rpc, s, bytes.size());
      reply(s, nullptr);
      return;
    }
    dispatcher->CallOn(h, rpc, CallContext{}, *req, resp.get(),
                       [req, resp, reply = std::move(reply)](absl::Status s) {
                         reply(s, resp.get());
                       });
  };
}

}  // namespace

SharedCallBinding::~SharedCallBinding() {
  // Stopped outside the lock: a server's thread may be in a handler.
  absl::flat_hash_map<std::pair<std::string, int>, Served> servers;
  {
    absl::MutexLock l(&mu_);
    servers.swap(servers_);
  }
}

void SharedCallBinding::Forget(const std::string& job_id, int trainer_id) {
  Served old;  // stops outside the lock
  absl::MutexLock l(&mu_);
  auto it = servers_.find({job_id, trainer_id});
  if (it == servers_.end()) return;
  old = std::move(it->second);
  servers_.erase(it);
}

absl::Status SharedCallBinding::Serve(
    const std::string& job_id, const std::shared_ptr<RequestHandler>& handler,
    int trainer_id, uint64_t region_id) {
  absl::StatusOr<std::shared_ptr<const SharedRegion>> region =
      handler->shared_regions().Find(trainer_id, region_id);
  if (!region.ok()) return region.status();
  if ((*region)->size() <
      SharedRegion::kHeaderBytes + shared_calls::kAreaBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared calls: region ", region_id, " of ",
                     (*region)->size(), " bytes holds no call area"));
  }
  auto dispatch = DispatchToJob(handler, trainer_id, region_id, dispatcher_);
  auto server = std::make_unique<SharedCallServer>(*std::move(region),
                                                   std::move(dispatch));
  std::vector<Served> old;
  {
    absl::MutexLock l(&mu_);
    Served& served = servers_[{job_id, trainer_id}];
    old.push_back(std::move(served));
    served = Served{handler, std::move(server)};
    // The servers of jobs that have ended go too.
    for (auto it = servers_.begin(); it != servers_.end();) {
      if (it->second.handler.expired()) {
        old.push_back(std::move(it->second));
        servers_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return absl::OkStatus();  // `old` stops here, outside the lock
}

}  // namespace shardps
