#ifndef SHARDPS_TRAINER_CORE_JSON_LINES_H_
#define SHARDPS_TRAINER_CORE_JSON_LINES_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {

// One JSON object on one line: {"event":"eval","pass":0,...}. Doubles are
// written with 17 significant digits, so they read back exactly.
// Thread-compatible.
class JsonLine {
 public:
  explicit JsonLine(absl::string_view event);
  JsonLine& Add(absl::string_view key, int64_t v);
  JsonLine& Add(absl::string_view key, int v) {
    return Add(key, static_cast<int64_t>(v));
  }
  JsonLine& Add(absl::string_view key, double v);
  JsonLine& Add(absl::string_view key, absl::string_view v);
  std::string str() const { return out_ + "}"; }

 private:
  void Key(absl::string_view key);
  std::string out_;
};

// Appends JSON lines to a file, flushing each. Thread-compatible.
class JsonLinesWriter {
 public:
  // An empty path gives a writer that writes nothing.
  static absl::StatusOr<std::unique_ptr<JsonLinesWriter>> Open(
      const std::string& path);
  ~JsonLinesWriter();
  void Write(const JsonLine& line);

 private:
  explicit JsonLinesWriter(FILE* f) : f_(f) {}
  FILE* f_;
};

}  // namespace shardps

#endif  // SHARDPS_TRAINER_CORE_JSON_LINES_H_
