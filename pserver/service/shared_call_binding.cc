#include "pserver/service/shared_call_binding.h"

#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps {
namespace {

// The request of a shared call, parsed and checked against the region it
// came through.
template <typename Request>
absl::Status ParseCall(absl::string_view bytes, int trainer_id,
                       uint64_t region_id, Request* req) {
  if (!req->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "shared call: a request that does not parse");
  }
  if (req->trainer_id() != trainer_id || req->shared_region() != region_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("shared call: trainer ", req->trainer_id(), " and region ",
                     req->shared_region(),
                     " named through the region of trainer ", trainer_id));
  }
  return absl::OkStatus();
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
      handler->SharedRegionOf(trainer_id, region_id);
  if (!region.ok()) return region.status();
  if ((*region)->size() <
      SharedRegion::kHeaderBytes + shared_calls::kAreaBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared calls: region ", region_id, " of ",
                     (*region)->size(), " bytes holds no call area"));
  }
  RpcMetrics* const metrics = metrics_;
  std::weak_ptr<RequestHandler> job = handler;
  auto dispatch = [job, trainer_id, region_id, metrics](
                      shared_calls::Method method, absl::string_view bytes,
                      SharedCallServer::Reply reply) {
    const absl::Time start = absl::Now();
    std::shared_ptr<RequestHandler> h = job.lock();
    if (h == nullptr) {
      reply(absl::NotFoundError("shared region: the job has ended here"),
            nullptr);
      return;
    }
    auto record = [metrics, start, n = bytes.size()](
                      const char* name, const absl::Status& s, size_t out) {
      if (metrics != nullptr) {
        metrics->Record(name, s.code(), absl::Now() - start, n, out);
      }
    };
    if (method == shared_calls::kPush) {
      PushRequest req;
      PushResponse resp;
      absl::Status s = ParseCall(bytes, trainer_id, region_id, &req);
      try {
        if (s.ok()) s = h->Push(req, &resp);
      } catch (const std::bad_alloc&) {
        s = absl::ResourceExhaustedError(
            "the pserver is out of memory (see --max_memory_mb)");
      }
      record("Push", s, s.ok() ? resp.ByteSizeLong() : 0);
      reply(s, &resp);
      return;
    }
    struct Exchange {
      PullRequest req;
      PullResponse resp;
    };
    auto x = std::make_shared<Exchange>();
    absl::Status s = ParseCall(bytes, trainer_id, region_id, &x->req);
    if (!s.ok()) {
      record("Pull", s, 0);
      reply(s, nullptr);
      return;
    }
    h->Pull(
        x->req, &x->resp,
        [x, h, record, metrics, reply = std::move(reply)](absl::Status s) {
          if (s.ok() && metrics != nullptr) {
            metrics->RecordPullWait(absl::Microseconds(x->resp.wait_micros()));
          }
          record("Pull", s, s.ok() ? x->resp.ByteSizeLong() : 0);
          reply(s, &x->resp);
        });
  };
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
