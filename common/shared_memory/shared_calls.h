#ifndef SHARDPS_COMMON_SHARED_MEMORY_SHARED_CALLS_H_
#define SHARDPS_COMMON_SHARED_MEMORY_SHARED_CALLS_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/shared_memory/shared_region.h"
#include "google/protobuf/message_lite.h"

namespace shardps {

// Calls through a shared region (docs/wire_protocol.md, "Shared calls"): a
// push or a pull of a trainer on the pserver's host whose values are in the
// region anyway goes without gRPC, as a serialized request in one of a few
// slots of the region and a futex to wake the other side. A call then costs
// two thread wake-ups instead of gRPC's round trip (about 50 against 200
// microseconds on the project's 2-core machine).
//
// The call area lies at SharedRegion::kHeaderBytes, kAreaBytes long: two
// doorbells (futex words; a side adds one to the other's and wakes it; the
// pserver's line also holds a word it sets when it stops serving), then
// kSlots slots, each a control line, a request area and a reply area. A
// slot's state word says who may write it: the trainer (free), the pserver
// (posted) or the trainer again (answered). The pserver trusts nothing in
// the region: it copies a request out before parsing it, bounds every
// length, and keeps its own record of the slots it is answering, so a
// trainer that rewrites the area only breaks its own calls.
namespace shared_calls {

inline constexpr int kSlots = 8;
inline constexpr size_t kControlBytes = 64;
inline constexpr size_t kRequestBytes = 8192;
inline constexpr size_t kReplyBytes = 8192;
inline constexpr size_t kSlotBytes =
    kControlBytes + kRequestBytes + kReplyBytes;
// The doorbells, each on a cache line of its own, then the slots.
inline constexpr size_t kBellBytes = 128;
inline constexpr size_t kAreaBytes = kBellBytes + kSlots * kSlotBytes;

// How long each side spins before it sleeps on the futex (see
// docs/performance.md, "Shared calls", for how it was chosen).
inline constexpr int kSpinMicros = 50;

// What a slot asks for.
enum Method : uint32_t { kPush = 1, kPull = 2 };

// The uint32 words of a slot's control line, in order; the request area
// follows the line, the reply area (the status message, then the reply)
// follows the request area.
enum ControlWord {
  kState = 0,    // 0 free (the trainer's), 1 posted, 2 answered
  kMethod,       // a Method
  kRequestSize,  // bytes of the serialized request
  kCode,         // the reply's absl::StatusCode
  kMessageSize,  // bytes of its message
  kReplySize,    // bytes of the serialized reply
};

}  // namespace shared_calls

// The pserver's side: one thread per region that takes posted requests and
// hands them to `dispatch`, which answers each once through its Reply, at
// once or later from any thread (a pull that waits for a step). Stops (and
// joins) on destruction, answering the calls it has not taken NOT_FOUND
// (naming "shared region"); replies that come later still land in the
// region, which stays mapped while one is pending.
class SharedCallServer {
 public:
  // Writes the answer of one call into its slot and wakes the trainer;
  // `reply` may be null when `status` is not OK. A reply that does not fit
  // is answered RESOURCE_EXHAUSTED naming "shared call", and the trainer
  // sends the call again over gRPC.
  using Reply = std::function<void(const absl::Status& status,
                                   const google::protobuf::MessageLite* reply)>;
  using Dispatch = std::function<void(shared_calls::Method method,
                                      absl::string_view request, Reply reply)>;

  // Serves the call area of `region`, which must hold one.
  SharedCallServer(std::shared_ptr<const SharedRegion> region,
                   Dispatch dispatch);
  ~SharedCallServer();
  SharedCallServer(const SharedCallServer&) = delete;
  SharedCallServer& operator=(const SharedCallServer&) = delete;

 private:
  struct State;
  void Loop();

  const std::shared_ptr<State> state_;
  const Dispatch dispatch_;
  std::thread thread_;
};

// The trainer's side: posts calls into free slots and runs each one's
// `done` on its own thread when the pserver has answered. A call that finds
// no free slot, or does not fit one, is not taken (TryCall returns false)
// and goes over gRPC. When the pserver process exits, or a call has no
// answer within `deadline`, every pending call ends NOT_FOUND naming
// "shared region" (the caller then sends it again over TCP) and no call is
// taken from then on; the same when the pserver stops serving the region
// (it was replaced). Thread-safe.
class SharedCaller {
 public:
  // Calls through the area of `region` (which must outlive this object), to
  // the pserver process `pid`. UNAVAILABLE when that process cannot be
  // watched.
  static absl::StatusOr<std::unique_ptr<SharedCaller>> Create(
      SharedRegion* region, pid_t pid, absl::Duration deadline);
  // Ends pending calls CANCELLED.
  ~SharedCaller();
  SharedCaller(const SharedCaller&) = delete;
  SharedCaller& operator=(const SharedCaller&) = delete;

  // Posts `request`; `reply` is filled before `done` runs, and must stay
  // alive until then.
  bool TryCall(shared_calls::Method method,
               const google::protobuf::MessageLite& request,
               google::protobuf::MessageLite* reply,
               std::function<void(absl::Status)> done);
  // False once the pserver went away or stopped answering.
  bool usable() const { return !failed_.load(); }
  // Ends the calls posted so far CANCELLED at once, without waiting for the
  // pserver: their replies are not written and their `done` does not run
  // again. Each slot stays taken until the pserver answers it (a held pull
  // within --max_pull_wait_s); calls posted later go ahead, but the
  // pserver still writes a cancelled call's values into the region where
  // it named them, so a later call whose values share those bytes can read
  // a mix: for a caller that stops using the region's values (a trainer
  // stopping on a fatal error).
  void CancelPending();

 private:
  // A slot's call; `reply` and `done` are null once it was cancelled.
  struct Pending {
    google::protobuf::MessageLite* reply = nullptr;
    std::function<void(absl::Status)> done;
    absl::Time posted;
  };
  SharedCaller(SharedRegion* region, int pidfd, absl::Duration deadline);
  void Loop();
  // Ends every pending call with `status`; no call is taken after.
  void FailAll(const absl::Status& status);

  SharedRegion* const region_;
  const int pidfd_;
  const absl::Duration deadline_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);  // per slot
  std::vector<bool> busy_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_SHARED_MEMORY_SHARED_CALLS_H_
