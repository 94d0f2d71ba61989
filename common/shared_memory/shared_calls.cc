#include "common/shared_memory/shared_calls.h"

#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {
namespace {

using shared_calls::kBellBytes;
using shared_calls::kControlBytes;
using shared_calls::kReplyBytes;
using shared_calls::kRequestBytes;
using shared_calls::kSlotBytes;
using shared_calls::kSlots;

// A slot's state word.
constexpr uint32_t kFree = 0;      // the trainer's
constexpr uint32_t kPosted = 1;    // the pserver's to answer
constexpr uint32_t kAnswered = 2;  // the trainer's to read

using Word = shared_calls::ControlWord;
using shared_calls::kCode;
using shared_calls::kMessageSize;
using shared_calls::kMethod;
using shared_calls::kReplySize;
using shared_calls::kRequestSize;
using shared_calls::kState;

// Every word in the region is read and written with atomics: the other
// process writes it at any time.
uint32_t Load(const uint32_t* w) {
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}
void Store(uint32_t* w, uint32_t v) {
  __atomic_store_n(w, v, __ATOMIC_RELEASE);
}

char* Area(const SharedRegion& region) {
  return region.data() + SharedRegion::kHeaderBytes;
}
uint32_t* ServerBell(char* area) { return reinterpret_cast<uint32_t*>(area); }
// Non-zero once the pserver no longer serves the area.
uint32_t* Closed(char* area) { return reinterpret_cast<uint32_t*>(area) + 2; }
uint32_t* ClientBell(char* area) {
  return reinterpret_cast<uint32_t*>(area + kBellBytes / 2);
}
char* Slot(char* area, int i) { return area + kBellBytes + i * kSlotBytes; }
uint32_t* Control(char* area, int i, Word w) {
  return reinterpret_cast<uint32_t*>(Slot(area, i)) + w;
}
char* RequestArea(char* area, int i) { return Slot(area, i) + kControlBytes; }
char* ReplyArea(char* area, int i) {
  return RequestArea(area, i) + kRequestBytes;
}

// Adds one to `bell` and wakes whoever waits on it (in either process).
void Ring(uint32_t* bell) {
  __atomic_fetch_add(bell, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, bell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Returns once `bell` differs from `seen`, or after `timeout`. Spins for
// `spin` first: the answer to a call often comes that soon, and a futex
// wake-up costs tens of microseconds on a virtual machine. Timed, since a
// pause instruction takes from 10 to 140 cycles depending on the processor.
void Wait(uint32_t* bell, uint32_t seen, absl::Duration timeout,
          absl::Duration spin) {
  if (spin > absl::ZeroDuration()) {
    const auto until =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(spin);
    do {
      for (int i = 0; i < 16; ++i) {
        if (Load(bell) != seen) return;
        __builtin_ia32_pause();
      }
    } while (std::chrono::steady_clock::now() < until);
  }
  timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, bell, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// How long a side spins before it sleeps: SHARDPS_SHARED_CALL_SPIN_US
// (microseconds; for measurements), else kSpinMicros.
absl::Duration SpinTime() {
  static const absl::Duration spin = [] {
    const char* env = std::getenv("SHARDPS_SHARED_CALL_SPIN_US");
    return absl::Microseconds(env != nullptr ? std::atoi(env)
                                             : shared_calls::kSpinMicros);
  }();
  return spin;
}

}  // namespace

struct SharedCallServer::State {
  explicit State(std::shared_ptr<const SharedRegion> r)
      : region(std::move(r)), area(Area(*region)) {
    CHECK_GE(region->size(),
             SharedRegion::kHeaderBytes + shared_calls::kAreaBytes)
        << "a shared region served for calls must hold a call area";
  }
  // Writes the answer of slot i and hands the slot back to the trainer.
  void Answer(int i, absl::Status status,
              const google::protobuf::MessageLite* reply);

  const std::shared_ptr<const SharedRegion> region;
  char* const area;
  std::atomic<bool> stop{false};
  // This side's own record of the slots being answered: what the trainer
  // writes into a slot's state is not believed while it is.
  std::array<std::atomic<bool>, kSlots> answering{};
};

void SharedCallServer::State::Answer(
    int i, absl::Status status, const google::protobuf::MessageLite* reply) {
  size_t reply_bytes = 0;
  if (status.ok() && reply != nullptr) {
    reply_bytes = reply->ByteSizeLong();
    if (reply_bytes > kReplyBytes) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("shared call: a reply of ", reply_bytes,
                       " bytes does not fit a slot of ", kReplyBytes));
      reply_bytes = 0;
    }
  }
  char* out = ReplyArea(area, i);
  if (!status.ok()) {
    const size_t n = std::min(status.message().size(), kReplyBytes);
    std::memcpy(out, status.message().data(), n);
    Store(Control(area, i, kMessageSize), static_cast<uint32_t>(n));
  } else {
    if (reply_bytes > 0) {
      reply->SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out));
    }
    Store(Control(area, i, kMessageSize), 0);
  }
  Store(Control(area, i, kReplySize), static_cast<uint32_t>(reply_bytes));
  Store(Control(area, i, kCode), static_cast<uint32_t>(status.code()));
  Store(Control(area, i, kState), kAnswered);
  Ring(ClientBell(area));
  answering[i].store(false);
  // A call the trainer posted in this slot while it was still marked as
  // being answered was skipped by the loop: wake it.
  if (Load(Control(area, i, kState)) == kPosted) Ring(ServerBell(area));
}

SharedCallServer::SharedCallServer(std::shared_ptr<const SharedRegion> region,
                                   Dispatch dispatch)
    : state_(std::make_shared<State>(std::move(region))),
      dispatch_(std::move(dispatch)),
      thread_([this] { Loop(); }) {}

SharedCallServer::~SharedCallServer() {
  state_->stop.store(true);
  Ring(ServerBell(state_->area));
  thread_.join();
  Store(Closed(state_->area), 1);
  Ring(ClientBell(state_->area));
  // Calls posted and not taken would wait for their deadline: the trainer
  // sends them over TCP now (those taken are answered by their replies).
  for (int i = 0; i < kSlots; ++i) {
    bool idle = false;
    if (Load(Control(state_->area, i, kState)) == kPosted &&
        state_->answering[i].compare_exchange_strong(idle, true)) {
      state_->Answer(
          i,
          absl::NotFoundError("shared region: closed by the pserver (replaced, "
                              "or the job ended); the call goes over TCP"),
          nullptr);
    }
  }
}

void SharedCallServer::Loop() {
  char* const area = state_->area;
  std::string request;
  while (!state_->stop.load()) {
    const uint32_t seen = Load(ServerBell(area));
    for (int i = 0; i < kSlots; ++i) {
      if (state_->answering[i].load() ||
          Load(Control(area, i, kState)) != kPosted) {
        continue;
      }
      state_->answering[i].store(true);
      Reply reply = [state = state_, i](
                        const absl::Status& s,
                        const google::protobuf::MessageLite* r) {
        state->Answer(i, s, r);
      };
      // Read once, then copied out: the trainer may change them meanwhile.
      const uint32_t method = Load(Control(area, i, kMethod));
      const uint32_t bytes = Load(Control(area, i, kRequestSize));
      if (bytes > kRequestBytes ||
          (method != shared_calls::kPush && method != shared_calls::kPull)) {
        reply(absl::InvalidArgumentError(
                  absl::StrCat("shared call: method ", method, " with ", bytes,
                               " bytes (at most ", kRequestBytes, ")")),
              nullptr);
        continue;
      }
      request.assign(RequestArea(area, i), bytes);
      dispatch_(static_cast<shared_calls::Method>(method), request,
                std::move(reply));
    }
    if (state_->stop.load()) break;
    Wait(ServerBell(area), seen, absl::Seconds(1), SpinTime());
  }
}

absl::StatusOr<std::unique_ptr<SharedCaller>> SharedCaller::Create(
    SharedRegion* region, pid_t pid, absl::Duration deadline) {
  if (region->size() < SharedRegion::kHeaderBytes + shared_calls::kAreaBytes) {
    return absl::InvalidArgumentError("the shared region has no call area");
  }
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot watch pserver process ", pid, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<SharedCaller>(
      new SharedCaller(region, pidfd, deadline));
}

SharedCaller::SharedCaller(SharedRegion* region, int pidfd,
                           absl::Duration deadline)
    : region_(region),
      pidfd_(pidfd),
      deadline_(deadline),
      pending_(kSlots),
      busy_(kSlots, false),
      thread_([this] { Loop(); }) {}

SharedCaller::~SharedCaller() {
  stop_.store(true);
  Ring(ClientBell(Area(*region_)));
  thread_.join();
  FailAll(absl::CancelledError("shared calls closed"));
  close(pidfd_);
}

bool SharedCaller::TryCall(shared_calls::Method method,
                           const google::protobuf::MessageLite& request,
                           google::protobuf::MessageLite* reply,
                           std::function<void(absl::Status)> done) {
  if (failed_.load() || Load(Closed(Area(*region_))) != 0) return false;
  const size_t bytes = request.ByteSizeLong();
  if (bytes > kRequestBytes) return false;
  char* const area = Area(*region_);
  {
    absl::MutexLock l(&mu_);
    if (failed_.load()) return false;
    auto free = std::find(busy_.begin(), busy_.end(), false);
    if (free == busy_.end()) return false;
    const int i = static_cast<int>(free - busy_.begin());
    busy_[i] = true;
    pending_[i] = Pending{reply, std::move(done), absl::Now()};
    request.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(RequestArea(area, i)));
    Store(Control(area, i, kMethod), method);
    Store(Control(area, i, kRequestSize), static_cast<uint32_t>(bytes));
    Store(Control(area, i, kState), kPosted);
  }
  Ring(ServerBell(area));
  return true;
}

void SharedCaller::Loop() {
  char* const area = Area(*region_);
  std::vector<std::pair<std::function<void(absl::Status)>, absl::Status>> ended;
  while (!stop_.load()) {
    const uint32_t seen = Load(ClientBell(area));
    absl::Time oldest = absl::InfiniteFuture();
    {
      absl::MutexLock l(&mu_);
      for (int i = 0; i < kSlots; ++i) {
        if (!busy_[i]) continue;
        if (Load(Control(area, i, kState)) != kAnswered) {
          oldest = std::min(oldest, pending_[i].posted);
          continue;
        }
        const uint32_t code = Load(Control(area, i, kCode));
        const uint32_t message = Load(Control(area, i, kMessageSize));
        const uint32_t bytes = Load(Control(area, i, kReplySize));
        const char* in = ReplyArea(area, i);
        absl::Status s;
        if (message > kReplyBytes || bytes > kReplyBytes) {
          s = absl::DataLossError("shared call: a malformed reply");
        } else if (code != 0) {
          s = absl::Status(static_cast<absl::StatusCode>(code),
                           absl::string_view(in, message));
        } else if (pending_[i].reply != nullptr &&
                   !pending_[i].reply->ParseFromArray(
                       in, static_cast<int>(bytes))) {
          s = absl::DataLossError("shared call: a reply that does not parse");
        }
        Store(Control(area, i, kState), kFree);
        busy_[i] = false;
        if (pending_[i].done == nullptr) continue;  // cancelled
        ended.emplace_back(std::move(pending_[i].done), std::move(s));
      }
    }
    for (auto& [done, s] : ended) done(std::move(s));
    ended.clear();
    if (absl::Now() - oldest > deadline_) {
      FailAll(absl::NotFoundError(absl::StrCat(
          "shared region: no answer from the pserver in ",
          absl::FormatDuration(deadline_), "; the call goes over TCP")));
    }
    Wait(ClientBell(area), seen, absl::Milliseconds(100), SpinTime());
    pollfd p{pidfd_, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {
      FailAll(absl::NotFoundError(
          "shared region: the pserver process exited; the call goes over "
          "TCP"));
    } else if (Load(Closed(area)) != 0) {
      FailAll(absl::NotFoundError(
          "shared region: closed by the pserver (replaced, or the job "
          "ended); the call goes over TCP"));
    }
  }
}

void SharedCaller::FailAll(const absl::Status& status) {
  std::vector<std::function<void(absl::Status)>> ended;
  {
    absl::MutexLock l(&mu_);
    failed_.store(true);
    for (int i = 0; i < kSlots; ++i) {
      if (!busy_[i]) continue;
      busy_[i] = false;
      if (pending_[i].done != nullptr) {
        ended.push_back(std::move(pending_[i].done));
      }
    }
  }
  for (auto& done : ended) done(status);
}

void SharedCaller::CancelPending() {
  std::vector<std::function<void(absl::Status)>> ended;
  {
    absl::MutexLock l(&mu_);
    for (int i = 0; i < kSlots; ++i) {
      if (!busy_[i] || pending_[i].done == nullptr) continue;
      ended.push_back(std::move(pending_[i].done));
      pending_[i].done = nullptr;
      pending_[i].reply = nullptr;
    }
  }
  for (auto& done : ended) {
    done(absl::CancelledError("shared call: cancelled by the trainer"));
  }
}

}  // namespace shardps
