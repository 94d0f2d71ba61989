#ifndef SHARDPS_TRAINER_TRANSPORT_REQUEST_STAMP_H_
#define SHARDPS_TRAINER_TRANSPORT_REQUEST_STAMP_H_

#include <cstdint>
#include <random>

#include "absl/time/clock.h"

namespace shardps {

// What every request of a trainer carries (docs/wire_protocol.md): its id,
// the incarnation of its process (a pserver refuses 0 in Register, and in
// any request of a trainer that registered), the
// timeline (generation) it is on, and a fresh non-zero id per push so that
// a retried push is applied once. Shared by a trainer's clients (JobClient,
// ParamClient, SparseClient). Thread-compatible: one training thread.
class RequestStamp {
 public:
  explicit RequestStamp(int trainer_id, uint64_t incarnation = 0)
      : trainer_id_(trainer_id),
        incarnation_(incarnation),
        ids_(std::random_device{}() ^
             (static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) << 8) ^
             static_cast<uint64_t>(trainer_id)) {}

  int trainer_id() const { return trainer_id_; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t generation() const { return generation_; }
  // The timeline adopted after joining or recovering: a pserver on another
  // one answers ABORTED.
  void set_generation(uint64_t generation) { generation_ = generation; }

  uint64_t NextRequestId() {
    uint64_t id = 0;
    while (id == 0) id = ids_();
    return id;
  }

  // Sets trainer id, generation and incarnation of a pull or push.
  template <typename Request>
  void Stamp(Request* req) const {
    req->set_trainer_id(trainer_id_);
    req->set_generation(generation_);
    req->set_incarnation(incarnation_);
  }

 private:
  const int trainer_id_;
  const uint64_t incarnation_;
  uint64_t generation_ = 0;
  std::mt19937_64 ids_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_TRANSPORT_REQUEST_STAMP_H_
