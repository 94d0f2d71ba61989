#ifndef SHARDPS_TOOLS_REQUEST_FUZZER_H_
#define SHARDPS_TOOLS_REQUEST_FUZZER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace shardps {

// One request for a method of a service, as bytes on the wire.
struct FuzzRequest {
  const google::protobuf::MethodDescriptor* method = nullptr;
  std::string path;   // "/shardps.ParameterServer/Push"
  std::string bytes;  // the request's encoding, possibly damaged
  // How it was made: "valid", "truncated", "bit-flipped" or "garbage".
  const char* kind = "";
};

// Requests for every method of some services, made from their descriptors (so a
// new field or method is fuzzed without a change here): each field set or
// not, numbers from the boundaries of their type (0, 1, -1, the extremes,
// 2^31-1, 2^32, ...) or small (ids, steps and indices that name real
// things), floats including NaN, infinities and denormals, bytes as
// float32 or uint64 arrays of random and boundary lengths, repeated fields
// from empty to thousands of elements, enums in and out of range. A tenth
// of the encodings are truncated, a tenth have bits flipped, a twentieth
// are random bytes. Deterministic for a seed. Not thread-safe.
class RequestFuzzer {
 public:
  RequestFuzzer(
      std::vector<const google::protobuf::ServiceDescriptor*> services,
      uint64_t seed);

  // From now on, requests for `names` only (method names of the services,
  // as "Push"; empty: every method). INVALID_ARGUMENT, naming it and the
  // services' methods, for a name no service has.
  absl::Status OnlyMethods(const std::vector<std::string>& names);

  FuzzRequest Next();

  // Fills `message` with random and boundary values (at most `depth`
  // levels of nested messages; bytes fields 4 MiB in all).
  void Fill(google::protobuf::Message* message, int depth);

 private:
  uint64_t Uniform(uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int64_t Int(bool is_signed, int bits);
  float Float();
  std::string Bytes();
  // Sets (or adds to) a number or bool field; the other types are
  // FillField's.
  void FillNumber(google::protobuf::Message* message,
                  const google::protobuf::FieldDescriptor* field);
  void FillField(google::protobuf::Message* message,
                 const google::protobuf::FieldDescriptor* field, int depth);
  void Damage(FuzzRequest* request);

  std::vector<const google::protobuf::ServiceDescriptor*> services_;
  std::vector<const google::protobuf::MethodDescriptor*> methods_;
  std::mt19937_64 rng_;
  // Bytes that bytes fields may still take in the message being made, so
  // that a request stays under a few MiB and the fuzzer sends many.
  size_t budget_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_TOOLS_REQUEST_FUZZER_H_
