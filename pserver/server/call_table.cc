#include "pserver/server/call_table.h"

#include <array>
#include <new>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {
namespace {

using google::protobuf::Message;

// Runs `call`, answering a failed allocation with RESOURCE_EXHAUSTED.
template <typename F>
absl::Status Guarded(F call) {
  try {
    return call();
  } catch (const std::bad_alloc&) {
    return OutOfMemoryStatus();
  }
}

// The handler's part a unary call goes to: the job's RequestHandler, its
// ReplicationHandler or its SharedRegions.
RequestHandler& PartOf(RequestHandler& h, RequestHandler*) { return h; }
ReplicationHandler& PartOf(RequestHandler& h, ReplicationHandler*) {
  return h.replication();
}
SharedRegions& PartOf(RequestHandler& h, SharedRegions*) {
  return h.shared_regions();
}

// The handler and messages of a unary method.
template <typename M>
struct UnaryMethod;
template <typename H, typename Req, typename Resp>
struct UnaryMethod<absl::Status (H::*)(const Req&, Resp*)> {
  using Handler = H;
  using Request = Req;
  using Response = Resp;
};

template <typename H, typename Req, typename Resp>
struct UnaryMethod<absl::Status (H::*)(const Req&, Resp*, const std::string&)>
    : UnaryMethod<absl::Status (H::*)(const Req&, Resp*)> {};

// A call between pservers: as Unary, and M is told which pserver made it
// (CallContext::peer_identity).
template <auto M>
void PeerUnary(RequestHandler& h, const CallContext& ctx, const Message& req,
               Message* resp, StatusCallback done) {
  using Method = UnaryMethod<decltype(M)>;
  using Req = typename Method::Request;
  using Resp = typename Method::Response;
  DCHECK(req.GetDescriptor() == Req::descriptor());
  done(Guarded([&] {
    return (h.replication().*M)(static_cast<const Req&>(req),
                                static_cast<Resp*>(resp), ctx.peer_identity);
  }));
}

// A call that answers at once: the method M of the handler's part, on the
// typed messages.
template <auto M>
void Unary(RequestHandler& h, const CallContext&, const Message& req,
           Message* resp, StatusCallback done) {
  using Method = UnaryMethod<decltype(M)>;
  using Req = typename Method::Request;
  using Resp = typename Method::Response;
  DCHECK(req.GetDescriptor() == Req::descriptor());
  DCHECK(resp->GetDescriptor() == Resp::descriptor());
  auto& part = PartOf(h, static_cast<typename Method::Handler*>(nullptr));
  done(Guarded([&] {
    return (part.*M)(static_cast<const Req&>(req), static_cast<Resp*>(resp));
  }));
}

void RegisterCall(RequestHandler& h, const CallContext& ctx, const Message& req,
                  Message* resp, StatusCallback done) {
  done(Guarded([&] {
    return h.Register(static_cast<const RegisterRequest&>(req),
                      static_cast<RegisterResponse*>(resp), ctx.peer);
  }));
}

// The lane of a pull's or push's dense values, into *lane: the one its
// transport brought, or that of the shared region it names (none: null);
// RESOURCE_EXHAUSTED when it cannot be made.
template <typename Request>
absl::Status LaneOf(RequestHandler& h, const CallContext& ctx,
                    const Request& req,
                    std::shared_ptr<const DenseValueLane>* lane) {
  if (ctx.lane != nullptr) {
    // The transport moved the values itself (the TCP lane).
    if (req.shared_region() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer ", req.trainer_id(), " names shared region ",
          req.shared_region(), " in a call whose values came another way"));
    }
    *lane = ctx.lane;
    return absl::OkStatus();
  }
  if (req.shared_region() == 0) return absl::OkStatus();
  return Guarded([&] {
    *lane = h.shared_regions().Lane(req.trainer_id(), req.shared_region());
    return absl::OkStatus();
  });
}

// The one call a handler may answer later (RequestHandler::Pull catches
// its own failed allocations).
void PullCall(RequestHandler& h, const CallContext& ctx, const Message& req,
              Message* resp, StatusCallback done) {
  const auto& pull = static_cast<const PullRequest&>(req);
  std::shared_ptr<const DenseValueLane> lane;
  if (absl::Status s = LaneOf(h, ctx, pull, &lane); !s.ok()) {
    done(s);
    return;
  }
  h.Pull(pull, static_cast<PullResponse*>(resp), std::move(done),
         std::move(lane));
}

void PushCall(RequestHandler& h, const CallContext& ctx, const Message& req,
              Message* resp, StatusCallback done) {
  const auto& push = static_cast<const PushRequest&>(req);
  std::shared_ptr<const DenseValueLane> lane;
  absl::Status s = LaneOf(h, ctx, push, &lane);
  if (s.ok()) {
    s = Guarded([&] {
      return h.Push(push, static_cast<PushResponse*>(resp), lane.get());
    });
  }
  done(std::move(s));
}

using RH = RequestHandler;
using RepH = ReplicationHandler;
constexpr CallThreads kCaller = CallThreads::kCaller;
constexpr CallThreads kIfReplicated = CallThreads::kPoolIfReplicated;
constexpr CallThreads kPeer = CallThreads::kPeerIfReplicated;

// Where a call goes: by default, a trainer's call to the RequestHandler's
// method of its name, on the pool when the job is replicated; a pserver's
// call to the ReplicationHandler's, on the pool of peer calls. The calls
// that go elsewhere or on other threads say so here.
template <PsRpc R>
struct Route {
  static constexpr bool kDefault = true;
};
#define SHARDPS_ROUTE(Name, threads, run)                            \
  template <>                                                        \
  struct Route<PsRpc::k##Name> {                                     \
    static constexpr bool kDefault = false;                          \
    static constexpr CallEntry kEntry{PsRpc::k##Name, threads, run}; \
  };
SHARDPS_ROUTE(Register, kIfReplicated, &RegisterCall)
SHARDPS_ROUTE(Pull, kIfReplicated, &PullCall)
SHARDPS_ROUTE(Push, kIfReplicated, &PushCall)
SHARDPS_ROUTE(OpenSharedMemory, kCaller, &Unary<&SharedRegions::Open>)
SHARDPS_ROUTE(ChangeView, CallThreads::kPool, &Unary<&RepH::ChangeView>)
SHARDPS_ROUTE(OpenTcpLane, kCaller, &Unary<&RH::OpenTcpLane>)
SHARDPS_ROUTE(ViewInspect, kCaller, &PeerUnary<&RepH::ViewInspect>)
#undef SHARDPS_ROUTE

// Each call's entry: its Route, or the default for its service. `H` only
// defers the default's method lookup to the calls that take it.
#define SHARDPS_ENTRY(Name, Request, Response, Default) \
  template <typename H = void>                          \
  constexpr CallEntry Entry##Name() {                   \
    if constexpr (Route<PsRpc::k##Name>::kDefault) {    \
      return Default(Name);                             \
    } else {                                            \
      return Dep<Route<PsRpc::k##Name>, H>::kEntry;     \
    }                                                   \
  }
#define SHARDPS_TRAINER_CALL(Name) \
  CallEntry { PsRpc::k##Name, kIfReplicated, &Unary<&Dep<RH, H>::Name> }
#define SHARDPS_PEER_CALL(Name) \
  CallEntry { PsRpc::k##Name, kPeer, &PeerUnary<&Dep<RepH, H>::Name> }
template <typename T, typename H>
using Dep = std::conditional_t<std::is_void_v<H>, T, T>;
#define SHARDPS_PS_ENTRY(Name, Request, Response) \
  SHARDPS_ENTRY(Name, Request, Response, SHARDPS_TRAINER_CALL)
#define SHARDPS_REPLICATION_ENTRY(Name, Request, Response) \
  SHARDPS_ENTRY(Name, Request, Response, SHARDPS_PEER_CALL)
SHARDPS_PS_CALLS(SHARDPS_PS_ENTRY)
SHARDPS_REPLICATION_CALLS(SHARDPS_REPLICATION_ENTRY)
#undef SHARDPS_PS_ENTRY
#undef SHARDPS_REPLICATION_ENTRY
#undef SHARDPS_TRAINER_CALL
#undef SHARDPS_PEER_CALL
#undef SHARDPS_ENTRY

// One entry a call, in the list's order (ps_calls.h).
#define SHARDPS_TABLE_ROW(Name, Request, Response) Entry##Name<>(),
constexpr std::array<CallEntry, kNumPsRpcs> kTable = {{SHARDPS_PS_CALLS(
    SHARDPS_TABLE_ROW) SHARDPS_REPLICATION_CALLS(SHARDPS_TABLE_ROW)}};
#undef SHARDPS_TABLE_ROW

constexpr bool InOrder() {
  for (int i = 0; i < kNumPsRpcs; ++i) {
    if (static_cast<int>(kTable[i].rpc) != i) return false;
  }
  return true;
}
static_assert(InOrder(), "a Route names another call than its own");

}  // namespace

absl::Status OutOfMemoryStatus() {
  return absl::ResourceExhaustedError(
      "the pserver is out of memory (see --max_memory_mb)");
}

const CallEntry& CallTableEntry(PsRpc rpc) {
  const int i = static_cast<int>(rpc);
  CHECK(i >= 0 && i < kNumPsRpcs) << "unknown PsRpc " << i;
  return kTable[i];
}

void SingleJobTarget::Call(PsRpc rpc, const CallContext& ctx,
                           const google::protobuf::Message& req,
                           google::protobuf::Message* resp,
                           StatusCallback done) {
  CallTableEntry(rpc).run(*handler_, ctx, req, resp, std::move(done));
}

}  // namespace shardps
