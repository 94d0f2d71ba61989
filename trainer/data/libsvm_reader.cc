#include "trainer/data/libsvm_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "trainer/data/gz_file.h"

namespace shardps {
namespace {

constexpr unsigned kGzBufferBytes = 1 << 18;

// DataLoss naming the file if zlib has flagged an error on `f` (a truncated
// or corrupt gzip stream, or a read error), else OK.
absl::Status CheckGzError(gzFile f, const std::string& path,
                          absl::string_view where) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_OK) return absl::OkStatus();
  if (err == Z_ERRNO) msg = std::strerror(errno);
  return absl::DataLossError(
      absl::StrCat(path, where, ": ", msg, " (truncated or corrupt file?)"));
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

// Splits the next whitespace-separated token off the front of `*rest`; false
// when only whitespace is left.
bool NextToken(absl::string_view* rest, absl::string_view* token) {
  size_t i = 0;
  while (i < rest->size() && IsSpace((*rest)[i])) ++i;
  if (i == rest->size()) return false;
  size_t j = i;
  while (j < rest->size() && !IsSpace((*rest)[j])) ++j;
  *token = rest->substr(i, j - i);
  rest->remove_prefix(j);
  return true;
}

// Reads lines of a gzip or plain file. Requires external synchronization.
class LineReader {
 public:
  LineReader(std::string path, GzFile file)
      : path_(std::move(path)), file_(std::move(file)) {}

  // Sets *line to the next line without its '\n', valid until the next call,
  // and returns true; returns false at the end of the file or on an error,
  // which is then in status().
  bool Next(absl::string_view* line) {
    long_line_.clear();
    bool any = false;
    while (true) {
      if (gzgets(file_.get(), buf_, sizeof(buf_)) == nullptr) {
        status_ = CheckGzError(file_.get(), path_,
                               absl::StrCat(", line ", line_number_ + 1));
        if (!status_.ok() || !any) return false;
        break;  // a last line without '\n'
      }
      any = true;
      const size_t n = std::strlen(buf_);
      if (n > 0 && buf_[n - 1] == '\n') {
        ++line_number_;
        if (long_line_.empty()) {
          *line = absl::string_view(buf_, n - 1);
          return true;
        }
        long_line_.append(buf_, n - 1);
        *line = long_line_;
        return true;
      }
      long_line_.append(buf_, n);
    }
    ++line_number_;
    *line = long_line_;
    return true;
  }

  int64_t line_number() const { return line_number_; }
  const absl::Status& status() const { return status_; }

 private:
  const std::string path_;
  GzFile file_;
  char buf_[1 << 16];
  std::string long_line_;  // a line longer than buf_, or the last line
  int64_t line_number_ = 0;
  absl::Status status_;
};

// Parses the records of one file into `data`, keeping record r (counted from
// `*next_record`) when r % num_shards == shard_index.
absl::Status ReadInto(const std::string& path, const LibsvmReadOptions& options,
                      int64_t* next_record, SparseData* data) {
  absl::StatusOr<GzFile> file = OpenGz(path, kGzBufferBytes);
  if (!file.ok()) return file.status();
  auto reader = std::make_unique<LineReader>(path, std::move(file).value());
  absl::string_view line;
  while (reader->Next(&line)) {
    const size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    absl::string_view token;
    if (!NextToken(&line, &token)) continue;  // blank or comment-only
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ", line ", reader->line_number(), ": bad ", what));
    };
    float raw = 0;
    if (!absl::SimpleAtof(token, &raw) || !std::isfinite(raw)) {
      return bad(absl::StrCat("label \"", token, "\": want a number"));
    }
    if (options.binary_labels && raw != 0 && raw != 1 && raw != -1) {
      return bad(absl::StrCat("label \"", token,
                              "\": want 0, 1, -1 or +1 for binary labels"));
    }
    const bool keep = *next_record % options.num_shards == options.shard_index;
    ++*next_record;
    while (NextToken(&line, &token)) {
      if (absl::StartsWith(token, "qid:")) continue;
      const size_t colon = token.find(':');
      uint64_t id = 0;
      float value = 0;
      if (colon == absl::string_view::npos ||
          !absl::SimpleAtoi(token.substr(0, colon), &id) ||
          !absl::SimpleAtof(token.substr(colon + 1), &value) ||
          !std::isfinite(value)) {
        return bad(absl::StrCat("feature \"", token,
                                "\": want <id>:<value> with an unsigned "
                                "64-bit id and a finite float value"));
      }
      if (keep) {
        data->ids.push_back(id);
        data->values.push_back(value);
      }
    }
    if (keep) {
      ++data->num_records;
      data->offsets.push_back(static_cast<int64_t>(data->ids.size()));
      data->labels.push_back(raw > 0 ? 1 : 0);
      data->raw_labels.push_back(raw);
    }
  }
  return reader->status();
}

}  // namespace

absl::StatusOr<SparseData> ReadLibsvmFiles(
    const std::vector<std::string>& paths, const LibsvmReadOptions& options) {
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index ", options.shard_index, " outside [0, ",
                     options.num_shards, ")"));
  }
  SparseData data;
  int64_t next_record = 0;
  for (const std::string& path : paths) {
    absl::Status s = ReadInto(path, options, &next_record, &data);
    if (!s.ok()) return s;
  }
  return data;
}

absl::StatusOr<SparseData> ReadLibsvm(const std::string& path,
                                      const LibsvmReadOptions& options) {
  return ReadLibsvmFiles({path}, options);
}

absl::Status SummarizeLibsvm(const std::string& path, LibsvmSummary* summary) {
  absl::StatusOr<GzFile> file = OpenGz(path, kGzBufferBytes);
  if (!file.ok()) return file.status();
  // kLabel: in a record's first token; kToken: in a later one.
  enum { kLineStart, kLabel, kRecord, kToken, kComment } state = kLineStart;
  std::string label;
  bool counted = false;  // the current token is a counted feature
  bool qid = false;      // the current token is a qid
  uint64_t id = 0;       // its digits so far
  auto end_label = [&] {
    double raw = 0;
    if (absl::SimpleAtod(label, &raw) && raw > 0) ++summary->positives;
  };
  std::unique_ptr<char[]> buf(new char[kGzBufferBytes]);
  while (true) {
    const int n = gzread(file->get(), buf.get(), kGzBufferBytes);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const char c = buf[i];
      if (state == kLabel && (c == '\n' || c == '#' || IsSpace(c))) {
        end_label();
        state = kRecord;
      }
      if (c == '\n') {
        state = kLineStart;
      } else if (state == kComment) {
        continue;
      } else if (c == '#') {
        state = kComment;
      } else if (IsSpace(c)) {
        if (state == kToken) state = kRecord;
      } else if (state == kLineStart) {
        ++summary->records;
        label.assign(1, c);
        state = kLabel;
      } else if (state == kLabel) {
        if (label.size() < 64) label.push_back(c);
      } else if (state == kRecord) {
        state = kToken;
        counted = false;
        qid = c == 'q';
        id = c >= '0' && c <= '9' ? static_cast<uint64_t>(c - '0') : 0;
      } else if (counted || qid) {
        continue;
      } else if (c == ':') {
        ++summary->features;
        summary->ids.Add(id);
        counted = true;
      } else if (c >= '0' && c <= '9') {
        id = id * 10 + static_cast<uint64_t>(c - '0');
      }
    }
  }
  if (state == kLabel) end_label();
  return CheckGzError(file->get(), path, "");
}

absl::StatusOr<int64_t> CountLibsvmRecords(const std::string& path) {
  LibsvmSummary summary;
  absl::Status s = SummarizeLibsvm(path, &summary);
  if (!s.ok()) return s;
  return summary.records;
}

absl::StatusOr<SparseData> SelectSparseRecords(const SparseData& data,
                                               int trainer_id,
                                               int num_trainers) {
  if (num_trainers < 1 || trainer_id < 0 || trainer_id >= num_trainers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer_id ", trainer_id, " outside [0, ", num_trainers, ")"));
  }
  const size_t n = static_cast<size_t>(std::max<int64_t>(data.num_records, 0));
  bool consistent = data.num_records >= 0 && data.offsets.size() == n + 1 &&
                    data.offsets[0] == 0 &&
                    data.ids.size() == static_cast<size_t>(data.offsets[n]) &&
                    data.values.size() == data.ids.size() &&
                    data.labels.size() == n &&
                    (data.raw_labels.empty() || data.raw_labels.size() == n);
  for (size_t r = 0; consistent && r < n; ++r) {
    consistent = data.offsets[r] <= data.offsets[r + 1];
  }
  if (!consistent) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inconsistent sparse data: ", data.num_records, " records, ",
        data.offsets.size(), " offsets, ", data.ids.size(), " ids, ",
        data.values.size(), " values, ", data.labels.size(), " labels, ",
        data.raw_labels.size(), " raw labels"));
  }
  SparseData out;
  for (size_t r = trainer_id; r < n; r += num_trainers) {
    out.ids.insert(out.ids.end(), data.ids.begin() + data.offsets[r],
                   data.ids.begin() + data.offsets[r + 1]);
    out.values.insert(out.values.end(), data.values.begin() + data.offsets[r],
                      data.values.begin() + data.offsets[r + 1]);
    out.offsets.push_back(static_cast<int64_t>(out.ids.size()));
    out.labels.push_back(data.labels[r]);
    if (!data.raw_labels.empty()) out.raw_labels.push_back(data.raw_labels[r]);
    ++out.num_records;
  }
  return out;
}

}  // namespace shardps
