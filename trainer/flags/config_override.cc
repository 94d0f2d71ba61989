#include "trainer/flags/config_override.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace shardps {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// One step of a path: a field name and, for a repeated field, which element.
struct PathPart {
  std::string name;
  bool indexed = false;
  std::string index;  // a number, or an element's `name`
};

absl::Status ParsePath(absl::string_view path, std::vector<PathPart>* parts) {
  for (absl::string_view piece : absl::StrSplit(path, '.')) {
    PathPart p;
    const size_t open = piece.find('[');
    if (open == absl::string_view::npos) {
      p.name = std::string(piece);
    } else {
      if (piece.back() != ']' || open + 2 > piece.size() - 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", piece, "\": an index is [N] or [name]"));
      }
      p.name = std::string(piece.substr(0, open));
      p.indexed = true;
      p.index = std::string(piece.substr(open + 1, piece.size() - open - 2));
    }
    if (p.name.empty()) {
      return absl::InvalidArgumentError("an empty field name in the path");
    }
    parts->push_back(std::move(p));
  }
  return absl::OkStatus();
}

const FieldDescriptor* FindField(const Message& m, const std::string& name,
                                 absl::Status* error) {
  const Descriptor* d = m.GetDescriptor();
  const FieldDescriptor* f = d->FindFieldByName(name);
  if (f == nullptr) {
    std::vector<std::string> names;
    for (int i = 0; i < d->field_count(); ++i) {
      names.push_back(d->field(i)->name());
    }
    *error = absl::InvalidArgumentError(
        absl::StrCat(d->name(), " has no field \"", name, "\" (it has ",
                     absl::StrJoin(names, ", "), ")"));
  }
  return f;
}

// The element of repeated message field `f` of `m` that `index` names.
absl::Status Element(Message* m, const FieldDescriptor* f,
                     const std::string& index, Message** out) {
  const Reflection* r = m->GetReflection();
  const int size = r->FieldSize(*m, f);
  int64_t i = 0;
  if (absl::SimpleAtoi(index, &i)) {
    if (i < 0) i += size;
    if (i < 0 || i >= size) {
      return absl::InvalidArgumentError(absl::StrCat(
          f->name(), "[", index, "]: it has ", size, " element(s)"));
    }
    *out = r->MutableRepeatedMessage(m, f, static_cast<int>(i));
    return absl::OkStatus();
  }
  const FieldDescriptor* name_field =
      f->message_type()->FindFieldByName("name");
  if (name_field == nullptr ||
      name_field->type() != FieldDescriptor::TYPE_STRING) {
    return absl::InvalidArgumentError(absl::StrCat(
        f->name(), "[", index, "]: its elements have no name; use a number"));
  }
  for (int k = 0; k < size; ++k) {
    Message* e = r->MutableRepeatedMessage(m, f, k);
    if (e->GetReflection()->GetString(*e, name_field) == index) {
      *out = e;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(f->name(), "[", index, "]: no element has that name"));
}

template <typename T>
absl::Status ParseInt(const std::string& v, T* out) {
  int64_t wide = 0;
  uint64_t uwide = 0;
  if (std::numeric_limits<T>::is_signed) {
    if (absl::SimpleAtoi(v, &wide) &&
        wide >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
        wide <= static_cast<int64_t>(std::numeric_limits<T>::max())) {
      *out = static_cast<T>(wide);
      return absl::OkStatus();
    }
  } else if (absl::SimpleAtoi(v, &uwide) &&
             uwide <= static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    *out = static_cast<T>(uwide);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", v, "\" is not an integer in range"));
}

// A double or float field from `v`: finite, and in a float's range for one.
absl::Status SetFloating(Message* m, const FieldDescriptor* f,
                         const std::string& v) {
  double x = 0;
  if (!absl::SimpleAtod(v, &x) || !std::isfinite(x)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", v, "\" is not a finite number"));
  }
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
    m->GetReflection()->SetDouble(m, f, x);
  } else if (std::fabs(x) > std::numeric_limits<float>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", v, "\" is out of a float's range"));
  } else {
    m->GetReflection()->SetFloat(m, f, static_cast<float>(x));
  }
  return absl::OkStatus();
}

// An enum field from a value's name or number; the error lists the names.
absl::Status SetEnum(Message* m, const FieldDescriptor* f,
                     const std::string& v) {
  const EnumValueDescriptor* e = f->enum_type()->FindValueByName(v);
  int32_t number = 0;
  if (e == nullptr && absl::SimpleAtoi(v, &number)) {
    e = f->enum_type()->FindValueByNumber(number);
  }
  if (e == nullptr) {
    std::vector<std::string> names;
    for (int i = 0; i < f->enum_type()->value_count(); ++i) {
      names.push_back(f->enum_type()->value(i)->name());
    }
    return absl::InvalidArgumentError(
        absl::StrCat("\"", v, "\" is not one of ", absl::StrJoin(names, ", ")));
  }
  m->GetReflection()->SetEnum(m, f, e);
  return absl::OkStatus();
}

absl::Status SetScalar(Message* m, const FieldDescriptor* f,
                       const std::string& v) {
  const Reflection* r = m->GetReflection();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t x = 0;
      absl::Status s = ParseInt(v, &x);
      if (s.ok()) r->SetInt32(m, f, x);
      return s;
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t x = 0;
      absl::Status s = ParseInt(v, &x);
      if (s.ok()) r->SetInt64(m, f, x);
      return s;
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t x = 0;
      absl::Status s = ParseInt(v, &x);
      if (s.ok()) r->SetUInt32(m, f, x);
      return s;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t x = 0;
      absl::Status s = ParseInt(v, &x);
      if (s.ok()) r->SetUInt64(m, f, x);
      return s;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return SetFloating(m, f, v);
    case FieldDescriptor::CPPTYPE_BOOL:
      if (v == "true" || v == "1") {
        r->SetBool(m, f, true);
      } else if (v == "false" || v == "0") {
        r->SetBool(m, f, false);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("\"", v, "\" is not true or false"));
      }
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_ENUM:
      return SetEnum(m, f, v);
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, f, v);
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return absl::InvalidArgumentError(
      "a message field takes a path to one of its fields, not a value");
}

absl::Status ApplyOne(absl::string_view assignment, Message* config) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError("not path=value");
  }
  std::vector<PathPart> parts;
  if (absl::Status s = ParsePath(assignment.substr(0, eq), &parts); !s.ok()) {
    return s;
  }
  const std::string value(assignment.substr(eq + 1));
  Message* m = config;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PathPart& p = parts[i];
    absl::Status error;
    const FieldDescriptor* f = FindField(*m, p.name, &error);
    if (f == nullptr) return error;
    const bool last = i + 1 == parts.size();
    if (f->is_repeated() != p.indexed) {
      return absl::InvalidArgumentError(absl::StrCat(
          p.name, f->is_repeated() ? " is repeated: give an index, [N] or "
                                     "[name]"
                                   : " is not repeated: no index"));
    }
    if (f->is_repeated() && f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.name, ": repeated scalar fields cannot be set here"));
    }
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      if (!last) {
        return absl::InvalidArgumentError(
            absl::StrCat(p.name, " is not a message: the path ends there"));
      }
      return SetScalar(m, f, value);
    }
    if (last) return SetScalar(m, f, value);  // the message-field error
    if (f->is_repeated()) {
      if (absl::Status s = Element(m, f, p.index, &m); !s.ok()) return s;
    } else {
      m = m->GetReflection()->MutableMessage(m, f);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyConfigSet(const std::string& assignments,
                            google::protobuf::Message* config) {
  for (absl::string_view a :
       absl::StrSplit(assignments, ',', absl::SkipWhitespace())) {
    absl::Status s = ApplyOne(absl::StripAsciiWhitespace(a), config);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--config_set: ", absl::StripAsciiWhitespace(a), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardps
