#include "tools/request_fuzzer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

namespace {

constexpr int kMaxDepth = 4;
constexpr size_t kBytesBudget = 4 << 20;

}  // namespace

RequestFuzzer::RequestFuzzer(
    std::vector<const google::protobuf::ServiceDescriptor*> services,
    uint64_t seed)
    : services_(std::move(services)), rng_(seed) {
  for (const google::protobuf::ServiceDescriptor* service : services_) {
    for (int i = 0; i < service->method_count(); ++i) {
      methods_.push_back(service->method(i));
    }
  }
}

absl::Status RequestFuzzer::OnlyMethods(const std::vector<std::string>& names) {
  std::vector<const google::protobuf::MethodDescriptor*> methods;
  for (const std::string& name : names) {
    const google::protobuf::MethodDescriptor* m = nullptr;
    std::vector<std::string> all, services;
    for (const google::protobuf::ServiceDescriptor* service : services_) {
      if (m == nullptr) m = service->FindMethodByName(name);
      services.push_back(service->full_name());
      for (int i = 0; i < service->method_count(); ++i) {
        all.push_back(service->method(i)->name());
      }
    }
    if (m == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(absl::StrJoin(services, " and "), " have no method ",
                       name, "; they have ", absl::StrJoin(all, ", ")));
    }
    methods.push_back(m);
  }
  if (!methods.empty()) methods_ = std::move(methods);
  return absl::OkStatus();
}

int64_t RequestFuzzer::Int(bool is_signed, int bits) {
  // Half small (ids, steps, indices that name real things), half from the
  // boundaries of the type and of the narrower types it may be cast to.
  if (Chance(0.5)) return static_cast<int64_t>(Uniform(5));
  static constexpr int64_t kBoundaries[] = {
      0,
      1,
      2,
      -1,
      -2,
      127,
      128,
      255,
      256,
      65535,
      65536,
      1 << 20,
      (1LL << 31) - 1,
      1LL << 31,
      (1LL << 32) - 1,
      1LL << 32,
      1000000000000000LL,
      std::numeric_limits<int64_t>::max(),
      std::numeric_limits<int64_t>::min()};
  int64_t v = Chance(0.8) ? kBoundaries[Uniform(std::size(kBoundaries))]
                          : static_cast<int64_t>(rng_());
  if (bits == 32) {
    v = is_signed ? static_cast<int32_t>(v) : static_cast<uint32_t>(v);
  }
  return v;
}

float RequestFuzzer::Float() {
  static constexpr float kSpecial[] = {0.0f,
                                       -0.0f,
                                       1.0f,
                                       -1.0f,
                                       1e-3f,
                                       1e30f,
                                       -1e30f,
                                       std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::lowest(),
                                       std::numeric_limits<float>::denorm_min(),
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::quiet_NaN()};
  if (Chance(0.5)) {
    return std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng_);
  }
  return kSpecial[Uniform(std::size(kSpecial))];
}

std::string RequestFuzzer::Bytes() {
  // Lengths: small, the sizes of small tables' blocks, and a few large.
  static constexpr size_t kCounts[] = {0,   1,   2,    3,    4,     16,
                                       100, 784, 1000, 4096, 65536, 1 << 20};
  size_t n = Chance(0.7) ? Uniform(33) : kCounts[Uniform(std::size(kCounts))];
  const int kind = static_cast<int>(Uniform(3));
  const size_t width = kind == 0 ? 4 : kind == 1 ? 8 : 1;
  n = std::min(n, budget_ / width);
  budget_ -= n * width;
  // Up to 64 random elements, repeated to the length: large arrays cost no
  // more to make than small ones.
  const size_t distinct = std::min<size_t>(n, 64);
  std::string out(n * width, '\0');
  for (size_t i = 0; i < distinct; ++i) {
    if (kind == 0) {
      const float f = Float();
      std::memcpy(&out[i * width], &f, width);
    } else if (kind == 1) {
      const uint64_t k = static_cast<uint64_t>(Int(false, 64));
      std::memcpy(&out[i * width], &k, width);
    } else {
      out[i] = static_cast<char>(rng_());
    }
  }
  for (size_t done = distinct * width; done > 0 && done < out.size();) {
    const size_t copy = std::min(done, out.size() - done);
    std::memcpy(&out[done], out.data(), copy);
    done += copy;
  }
  return out;
}

// Sets (or, when repeated, adds to) the number or bool field `f` of `m` a
// random or boundary value of its type.
void RequestFuzzer::FillNumber(Message* m, const FieldDescriptor* f) {
  const Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      const int32_t v = static_cast<int32_t>(Int(true, 32));
      rep ? r->AddInt32(m, f, v) : r->SetInt32(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v = Int(true, 64);
      rep ? r->AddInt64(m, f, v) : r->SetInt64(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      const uint32_t v = static_cast<uint32_t>(Int(false, 32));
      rep ? r->AddUInt32(m, f, v) : r->SetUInt32(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t v = static_cast<uint64_t>(Int(false, 64));
      rep ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const float v = Float();
      rep ? r->AddFloat(m, f, v) : r->SetFloat(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      const double v = Float();
      rep ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const bool v = Chance(0.5);
      rep ? r->AddBool(m, f, v) : r->SetBool(m, f, v);
      break;
    }
    default:  // Not a number: FillField fills enums, strings and messages.
      break;
  }
}

void RequestFuzzer::FillField(Message* m, const FieldDescriptor* f, int depth) {
  const Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_BOOL:
      FillNumber(m, f);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      // Mostly a declared value; sometimes a number no value has.
      const auto* e = f->enum_type();
      const int v =
          Chance(0.9)
              ? e->value(static_cast<int>(Uniform(e->value_count())))->number()
              : static_cast<int>(Int(true, 32));
      rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v = f->type() == FieldDescriptor::TYPE_STRING
                          ? absl::StrCat("t", Uniform(4))
                          : Bytes();
      if (f->type() == FieldDescriptor::TYPE_STRING && Chance(0.2)) {
        v = std::string(Uniform(300), 'x');
      }
      rep ? r->AddString(m, f, std::move(v)) : r->SetString(m, f, std::move(v));
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      Message* sub = rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
      Fill(sub, depth - 1);
      break;
    }
  }
}

void RequestFuzzer::Fill(Message* m, int depth) {
  if (depth == kMaxDepth) budget_ = kBytesBudget;
  if (depth <= 0) return;
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (!Chance(0.6)) continue;
    if (!f->is_repeated()) {
      FillField(m, f, depth);
      continue;
    }
    // Repeated: a few, or (rarely) thousands; messages that many times
    // only as copies of one (a pull naming one block 3000 times).
    size_t n = Uniform(4);
    const bool same = Chance(0.3);
    const bool message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (Chance(0.05) && (same || !message)) n = 1 + Uniform(3000);
    for (size_t k = 0; k < n; ++k) {
      if (same && k > 0) {
        const Reflection* r = m->GetReflection();
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          // Copies count against the request's bytes too: 3000 copies of a
          // message with a megabyte of values would be gigabytes.
          const Message& first = r->GetRepeatedMessage(*m, f, 0);
          const size_t size = first.ByteSizeLong();
          if (size > budget_) break;
          budget_ -= size;
          r->AddMessage(m, f)->CopyFrom(first);
          continue;
        }
      }
      FillField(m, f, depth);
    }
  }
}

void RequestFuzzer::Damage(FuzzRequest* q) {
  const double p = std::uniform_real_distribution<>(0, 1)(rng_);
  std::string& b = q->bytes;
  if (p < 0.10 && !b.empty()) {
    b.resize(Uniform(b.size()));
    q->kind = "truncated";
  } else if (p < 0.20 && !b.empty()) {
    const int flips = 1 + static_cast<int>(Uniform(8));
    for (int i = 0; i < flips; ++i) {
      b[Uniform(b.size())] ^= static_cast<char>(1u << Uniform(8));
    }
    q->kind = "bit-flipped";
  } else if (p < 0.25) {
    b.resize(Uniform(256));
    for (char& c : b) c = static_cast<char>(rng_());
    q->kind = "garbage";
  }
}

FuzzRequest RequestFuzzer::Next() {
  FuzzRequest q;
  q.method = methods_[Uniform(methods_.size())];
  q.path = absl::StrCat("/", q.method->service()->full_name(), "/",
                        q.method->name());
  std::unique_ptr<Message> m(
      google::protobuf::MessageFactory::generated_factory()
          ->GetPrototype(q.method->input_type())
          ->New());
  Fill(m.get(), kMaxDepth);
  q.bytes = m->SerializeAsString();
  q.kind = "valid";
  Damage(&q);
  return q;
}

}  // namespace shardps
