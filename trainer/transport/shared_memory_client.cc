#include "trainer/transport/shared_memory_client.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

// A pserver's answer to a call that names a shared region it does not hold
// (SharedRegions::Find on the pserver).
bool IsLostRegion(const absl::Status& s) {
  return absl::IsNotFound(s) && absl::StrContains(s.message(), "shared region");
}

// A shared call whose reply did not fit its slot (SharedCallServer).
bool IsTooLargeForSlot(const absl::Status& s) {
  return absl::IsResourceExhausted(s) &&
         absl::StartsWith(s.message(), "shared call:");
}

// How long a shared call waits for its answer before going over TCP, as
// long as one attempt of a gRPC call (RpcOptions).
constexpr absl::Duration kSharedCallDeadline = absl::Seconds(60);

}  // namespace

// A pull through the region: the caller's request, targets and response
// (alive until `done`), and the request as it names the region.
struct SharedMemoryPsClient::PullCall {
  const PullRequest* req;
  const DensePullTargets* targets;
  PullResponse* resp;
  PullRequest shared;
  std::vector<uint64_t> at;
};

// A push through the region: the caller's push and response (alive until
// `done`), the push as it names the region, and the id it is sent again
// under, in the message, should the pserver have lost the region.
struct SharedMemoryPsClient::PushCall {
  const DensePush* push;
  PushResponse* resp;
  DensePush shared;
  PushRequest shared_req;  // `shared` as a call through a slot sends it
  uint64_t tcp_request_id = 0;
  DensePush tcp;
};

absl::StatusOr<std::unique_ptr<SharedMemoryPsClient>>
SharedMemoryPsClient::Open(PsClientInterface* inner, RequestStamp* stamp,
                           const Options& options) {
  std::unique_ptr<SharedMemoryPsClient> c(
      new SharedMemoryPsClient(inner, stamp));
  // The pushes' values first, then the pulls', each block at the next
  // float32 offset after the header (and the call area).
  const uint64_t start = SharedRegion::kHeaderBytes +
                         (options.calls ? shared_calls::kAreaBytes : 0);
  uint64_t at = start;
  for (auto [blocks, slots] : {std::make_pair(&options.pushes, &c->push_at_),
                               std::make_pair(&options.pulls, &c->pull_at_)}) {
    for (const Block& b : *blocks) {
      (*slots)[{b.table_id, b.block}] = Slot{at, b.size};
      at += static_cast<uint64_t>(b.size) * sizeof(float);
    }
  }
  if (at == start) {
    return absl::NotFoundError("it holds no dense block of this job");
  }
  SharedMemoryRequest req;
  req.set_trainer_id(stamp->trainer_id());
  req.set_incarnation(stamp->incarnation());
  req.set_bytes(at);
  req.set_calls(options.calls);
  SharedMemoryResponse resp;
  RETURN_IF_ERROR(inner->OpenSharedMemory(req, &resp));
  ASSIGN_OR_RETURN(c->region_,
                   SharedRegion::Attach(static_cast<pid_t>(resp.pid()),
                                        resp.fd(), resp.bytes(), resp.token()));
  if (c->region_->size() < at) {
    return absl::FailedPreconditionError(absl::StrCat(
        "its region has ", c->region_->size(), " bytes, not ", at));
  }
  c->id_ = resp.region_id();
  if (resp.calls()) {
    absl::StatusOr<std::unique_ptr<SharedCaller>> caller = SharedCaller::Create(
        c->region_.get(), static_cast<pid_t>(resp.pid()), kSharedCallDeadline);
    if (caller.ok()) {
      c->caller_ = *std::move(caller);
    } else {
      LOG(INFO) << "pserver " << inner->address()
                << ": pushes and pulls go over gRPC ("
                << caller.status().message() << ")";
    }
  }
  return c;
}

void SharedMemoryPsClient::CancelSharedCalls() {
  if (caller_ != nullptr) caller_->CancelPending();
}

void SharedMemoryPsClient::CancelCalls() {
  CancelSharedCalls();
  inner_->CancelCalls();
}

void SharedMemoryPsClient::Lose(const absl::Status& why) {
  if (!lost_.exchange(true)) {
    LOG(WARNING) << why.message() << "; dense values go over TCP from now on";
  }
}

template <typename Request, typename Response>
void SharedMemoryPsClient::Send(shared_calls::Method method, const Request& req,
                                Response* resp,
                                std::function<void(StatusCallback)> over_grpc,
                                StatusCallback done) {
  if (caller_ != nullptr &&
      caller_->TryCall(method, req, resp,
                       [resp, over_grpc, done](absl::Status s) {
                         if (!IsTooLargeForSlot(s) && !absl::IsUnavailable(s) &&
                             !absl::IsDeadlineExceeded(s)) {
                           done(std::move(s));
                           return;
                         }
                         // A pull's reply with many blocks, a pull that
                         // waited --max_pull_wait_s, a pserver shutting
                         // down: again over gRPC, which waits for the
                         // pserver and retries (--rpc_retry_s) as for any
                         // transient failure. A push keeps its request id,
                         // so it is applied once.
                         resp->Clear();
                         over_grpc(done);
                       })) {
    return;
  }
  over_grpc(std::move(done));
}

bool SharedMemoryPsClient::PlacePull(const PullRequest& req,
                                     const DensePullTargets& targets,
                                     std::vector<uint64_t>* at) const {
  if (lost() || req.encoding() != FLOAT32 || req.blocks_size() == 0 ||
      req.sparse_size() > 0 || req.lars_norms() || req.shared_region() != 0 ||
      targets.size() != static_cast<size_t>(req.blocks_size())) {
    return false;
  }
  for (int i = 0; i < req.blocks_size(); ++i) {
    auto it = pull_at_.find({req.blocks(i).table_id(), req.blocks(i).block()});
    if (it == pull_at_.end() ||
        static_cast<int64_t>(targets[i].size()) != it->second.size) {
      return false;
    }
    at->push_back(it->second.offset);
  }
  return true;
}

bool SharedMemoryPsClient::PlacePush(const DensePush& push,
                                     std::vector<uint64_t>* at) const {
  if (lost() || push.blocks.empty() || push.header.shared_region() != 0) {
    return false;
  }
  for (const DenseValuesRef& b : push.blocks) {
    auto it = push_at_.find({b.table_id, b.block});
    if (b.encoding != FLOAT32 || it == push_at_.end() ||
        b.bytes.size() !=
            static_cast<size_t>(it->second.size) * sizeof(float)) {
      return false;
    }
    at->push_back(it->second.offset);
  }
  return true;
}

void SharedMemoryPsClient::PullDenseAsync(const PullRequest& req,
                                          const DensePullTargets* targets,
                                          PullResponse* resp,
                                          StatusCallback done) {
  auto p = std::make_shared<PullCall>();
  if (!PlacePull(req, *targets, &p->at)) {
    inner_->PullDenseAsync(req, targets, resp, std::move(done));
    return;
  }
  p->req = &req;
  p->targets = targets;
  p->resp = resp;
  p->shared = req;
  p->shared.set_shared_region(id_);
  for (int i = 0; i < req.blocks_size(); ++i) {
    p->shared.mutable_blocks(i)->set_shared_offset(p->at[i]);
  }
  Send(
      shared_calls::kPull, p->shared, resp,
      [this, p](StatusCallback cb) {
        inner_->PullAsync(p->shared, p->resp, std::move(cb));
      },
      [this, p, done](absl::Status s) {
        if (IsLostRegion(s)) {
          // Again in the message (a pull changes nothing on the pserver).
          Lose(s);
          p->resp->Clear();
          inner_->PullDenseAsync(*p->req, p->targets, p->resp, done);
          return;
        }
        if (s.ok()) s = TakePulled(*p);
        done(std::move(s));
      });
}

absl::Status SharedMemoryPsClient::TakePulled(const PullCall& p) const {
  const PullResponse& resp = *p.resp;
  if (resp.blocks_size() != p.req->blocks_size()) {
    return absl::DataLossError(absl::StrCat(
        "pull from ", address(), ": asked for ", p.req->blocks_size(),
        " blocks, got ", resp.blocks_size()));
  }
  for (int i = 0; i < resp.blocks_size(); ++i) {
    const DenseBlock& got = resp.blocks(i);
    const BlockRef& want = p.req->blocks(i);
    if (got.table_id() != want.table_id() || got.block() != want.block() ||
        got.encoding() != FLOAT32 || !got.values().empty() ||
        got.shared_offset() != p.at[i]) {
      return MismatchedPullBlock(address(), i);
    }
    const absl::Span<float> to = (*p.targets)[i];
    std::memcpy(to.data(), region_->data() + p.at[i],
                to.size() * sizeof(float));
  }
  return absl::OkStatus();
}

void SharedMemoryPsClient::PushDenseAsync(const DensePush& push,
                                          PushResponse* resp,
                                          StatusCallback done) {
  std::vector<uint64_t> at;
  if (!PlacePush(push, &at)) {
    inner_->PushDenseAsync(push, resp, std::move(done));
    return;
  }
  auto p = std::make_shared<PushCall>();
  p->push = &push;
  p->resp = resp;
  p->tcp_request_id = stamp_->NextRequestId();
  p->shared.header = push.header;
  p->shared.header.set_shared_region(id_);
  for (size_t i = 0; i < push.blocks.size(); ++i) {
    DenseValuesRef ref = push.blocks[i];
    std::memcpy(region_->data() + at[i], ref.bytes.data(), ref.bytes.size());
    ref.bytes = absl::string_view();
    ref.shared_offset = at[i];
    p->shared.blocks.push_back(ref);
  }
  if (caller_ != nullptr) p->shared_req = ToPushRequest(p->shared);
  Send(
      shared_calls::kPush, p->shared_req, resp,
      [this, p](StatusCallback cb) {
        inner_->PushDenseAsync(p->shared, p->resp, std::move(cb));
      },
      [this, p, done](absl::Status s) {
        if (!IsLostRegion(s)) {
          done(std::move(s));
          return;
        }
        // Refused before anything was applied: again in the message,
        // under a new id (the pserver remembers the refusal under the old
        // one).
        Lose(s);
        p->tcp = *p->push;
        p->tcp.header.set_request_id(p->tcp_request_id);
        p->resp->Clear();
        inner_->PushDenseAsync(p->tcp, p->resp, done);
      });
}

}  // namespace shardps
