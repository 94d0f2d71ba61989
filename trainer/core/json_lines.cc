#include "trainer/core/json_lines.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardps {
namespace {

std::string Escape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace

JsonLine::JsonLine(absl::string_view event) {
  out_ = absl::StrCat("{\"event\":\"", Escape(event), "\"");
}

void JsonLine::Key(absl::string_view key) {
  absl::StrAppend(&out_, ",\"", Escape(key), "\":");
}

JsonLine& JsonLine::Add(absl::string_view key, int64_t v) {
  Key(key);
  absl::StrAppend(&out_, v);
  return *this;
}

JsonLine& JsonLine::Add(absl::string_view key, double v) {
  Key(key);
  if (std::isfinite(v)) {
    absl::StrAppend(&out_, absl::StrFormat("%.17g", v));
  } else {
    absl::StrAppend(&out_, "null");  // JSON has no NaN or Inf
  }
  return *this;
}

JsonLine& JsonLine::Add(absl::string_view key, absl::string_view v) {
  Key(key);
  absl::StrAppend(&out_, "\"", Escape(v), "\"");
  return *this;
}

absl::StatusOr<std::unique_ptr<JsonLinesWriter>> JsonLinesWriter::Open(
    const std::string& path) {
  FILE* f = nullptr;
  if (!path.empty()) {
    f = std::fopen(path.c_str(), "a");
    if (f == nullptr) {
      return absl::PermissionDeniedError(
          absl::StrCat("--metrics_file: cannot open ", path, " for appending"));
    }
    // Unbuffered: each line goes out in one write(2) to a file opened with
    // O_APPEND, so trainers sharing a file never interleave inside a line
    // and a reader never sees half a line that a full buffer split.
    std::setvbuf(f, nullptr, _IONBF, 0);
  }
  return std::unique_ptr<JsonLinesWriter>(new JsonLinesWriter(f));
}

JsonLinesWriter::~JsonLinesWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void JsonLinesWriter::Write(const JsonLine& line) {
  if (f_ == nullptr) return;
  const std::string s = line.str() + "\n";
  std::fwrite(s.data(), 1, s.size(), f_);
}

}  // namespace shardps
