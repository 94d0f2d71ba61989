#include "common/storage/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

constexpr int kStepDigits = 12;
constexpr absl::string_view kManifestMagic = "shardps-checkpoint 1";
// Blobs are appended and checksummed in pieces of this size, so a write of
// a large table is not one giant syscall and progress is interruptible.
constexpr size_t kWriteChunkBytes = 4 << 20;

// zlib's crc32 of `data`, continuing from `crc` (0 to start).
uint32_t Crc32(absl::string_view data, uint32_t crc = 0) {
  return static_cast<uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

std::string Hex32(uint32_t v) { return absl::StrFormat("%08x", v); }

// Prefixes the message, keeping the code.
absl::Status Annotate(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

absl::Status ValidateName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name[0] == '.' ||
      name == kCheckpointManifestName) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad checkpoint file name \"", absl::CEscape(name),
                     "\": must be 1-255 characters, not start with '.', "
                     "not be MANIFEST"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad checkpoint file name \"", absl::CEscape(name),
          "\": only letters, digits, '.', '_' and '-' are allowed"));
    }
  }
  return absl::OkStatus();
}

// The step of a complete checkpoint's directory name, or -1.
int64_t ParseDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kCheckpointDirPrefix)) return -1;
  if (name.size() != kStepDigits) return -1;
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int64_t step;
  if (!absl::SimpleAtoi(name, &step)) return -1;
  return step;
}

bool IsTmpDirName(absl::string_view name) {
  return absl::StartsWith(name, kCheckpointDirPrefix) &&
         absl::EndsWith(name, kCheckpointTmpSuffix);
}

// Creates `path`, appends `data` in pieces, fsyncs and closes it. Sets
// *crc to the crc32 of `data`, computed piece by piece as it is written (one
// pass over the bytes).
absl::Status WriteWholeFile(Env* env, const std::string& path,
                            absl::string_view data, uint32_t* crc) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   env->NewWritableFile(path));
  *crc = 0;
  for (size_t pos = 0; pos < data.size(); pos += kWriteChunkBytes) {
    absl::string_view piece = data.substr(pos, kWriteChunkBytes);
    *crc = Crc32(piece, *crc);
    RETURN_IF_ERROR(file->Append(piece));
  }
  RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

struct ManifestEntry {
  std::string name;
  uint64_t size = 0;
  uint32_t crc = 0;
};

struct Manifest {
  int64_t step = 0;
  std::string metadata;
  std::vector<ManifestEntry> files;
};

std::string SerializeManifest(int64_t step, absl::string_view metadata,
                              const std::vector<ManifestEntry>& files) {
  std::string out = absl::StrCat(kManifestMagic, "\nstep ", step, "\n");
  absl::StrAppend(&out, "metadata ", metadata.size(), " ",
                  metadata.empty() ? "-" : absl::BytesToHexString(metadata),
                  "\n");
  absl::StrAppend(&out, "files ", files.size(), "\n");
  for (const ManifestEntry& f : files) {
    absl::StrAppend(&out, "file ", f.name, " ", f.size, " ", Hex32(f.crc),
                    "\n");
  }
  absl::StrAppend(&out, "checksum ", Hex32(Crc32(out)), "\n");
  return out;
}

bool ParseHex32(absl::string_view s, uint32_t* v) {
  if (s.size() != 8) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleHexAtoi(s, v);
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) &&
        (c < 'a' || c > 'f')) {
      return false;
    }
  }
  return true;
}

// The body of a manifest read from `path` (all before its last line,
// "checksum <crc32 of the body>"), its checksum verified. kDataLoss on any
// defect.
absl::StatusOr<absl::string_view> VerifiedManifestBody(
    absl::string_view text, const std::string& path) {
  auto bad = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (text.empty()) return bad("empty");
  if (text.back() != '\n') return bad("truncated (no final newline)");
  // The last line is "checksum <crc32 of everything before it>".
  size_t last = text.rfind('\n', text.size() - 2);
  size_t body_len = last == absl::string_view::npos ? 0 : last + 1;
  absl::string_view body = text.substr(0, body_len);
  absl::string_view sum_line = text.substr(body_len);
  sum_line.remove_suffix(1);
  uint32_t want;
  if (!absl::ConsumePrefix(&sum_line, "checksum ") ||
      !ParseHex32(sum_line, &want)) {
    return bad("last line is not \"checksum <crc32>\" (truncated?)");
  }
  uint32_t got = Crc32(body);
  if (got != want) {
    return bad(absl::StrCat("checksum 0x", Hex32(got), " != recorded 0x",
                            Hex32(want)));
  }
  return body;
}

// Parses and verifies a manifest read from `path`. kDataLoss on any defect.
absl::StatusOr<Manifest> ParseManifest(absl::string_view text,
                                       const std::string& path) {
  auto bad = [&path](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  ASSIGN_OR_RETURN(absl::string_view body, VerifiedManifestBody(text, path));
  std::vector<absl::string_view> lines = absl::StrSplit(body, '\n');
  lines.pop_back();  // empty piece after the final newline
  size_t i = 0;
  auto next = [&](absl::string_view key,
                  std::vector<absl::string_view>* fields) -> bool {
    if (i >= lines.size()) return false;
    *fields = absl::StrSplit(lines[i++], ' ');
    return !fields->empty() && (*fields)[0] == key;
  };
  if (lines.empty() || lines[i++] != kManifestMagic) {
    return bad(absl::StrCat("first line is not \"", kManifestMagic, "\""));
  }
  Manifest m;
  std::vector<absl::string_view> f;
  if (!next("step", &f) || f.size() != 2 || !absl::SimpleAtoi(f[1], &m.step)) {
    return bad("bad step line");
  }
  uint64_t meta_len;
  if (!next("metadata", &f) || f.size() != 3 ||
      !absl::SimpleAtoi(f[1], &meta_len)) {
    return bad("bad metadata line");
  }
  if (f[2] == "-" && meta_len == 0) {
    // empty metadata
  } else if (f[2].size() != 2 * meta_len || !IsLowerHex(f[2])) {
    return bad("metadata length and hex do not agree");
  } else {
    m.metadata = absl::HexStringToBytes(f[2]);
  }
  uint64_t count;
  if (!next("files", &f) || f.size() != 2 || !absl::SimpleAtoi(f[1], &count) ||
      count != lines.size() - i) {
    return bad("bad files line");
  }
  for (uint64_t k = 0; k < count; ++k) {
    ManifestEntry e;
    if (!next("file", &f) || f.size() != 4 ||
        !absl::SimpleAtoi(f[2], &e.size) || !ParseHex32(f[3], &e.crc) ||
        !ValidateName(f[1]).ok()) {
      return bad(absl::StrCat("bad file line ", i));
    }
    e.name = std::string(f[1]);
    m.files.push_back(std::move(e));
  }
  return m;
}

absl::StatusOr<Manifest> ReadManifest(Env* env, const std::string& dir) {
  std::string path = JoinPath(dir, kCheckpointManifestName);
  std::string text;
  absl::Status s = env->ReadFileToString(path, &text);
  if (absl::IsNotFound(s)) {
    // A committed directory always has one.
    return absl::DataLossError(absl::StrCat(path, ": missing"));
  }
  RETURN_IF_ERROR(s);
  return ParseManifest(text, path);
}

// Verifies that the manifest in `dir` belongs to `step`.
absl::Status CheckManifestStep(const Manifest& m, int64_t step,
                               const std::string& dir) {
  if (m.step != step) {
    return absl::DataLossError(
        absl::StrCat(JoinPath(dir, kCheckpointManifestName), ": step ", m.step,
                     " != directory's step ", step));
  }
  return absl::OkStatus();
}

bool IsSkippable(const absl::Status& s) {
  return absl::IsDataLoss(s) || absl::IsNotFound(s);
}

}  // namespace

std::string CheckpointDirName(int64_t step) {
  DCHECK(step >= 0 && step <= kMaxCheckpointStep) << step;
  return absl::StrFormat("%s%012d", kCheckpointDirPrefix, step);
}

// ---------------------------------------------------------------------------
// CheckpointWriter

CheckpointWriter::CheckpointWriter(Env* env, std::string root_dir, int keep)
    : env_(env), root_(std::move(root_dir)), keep_(keep) {
  CHECK(env_ != nullptr);
  CHECK_GE(keep_, 1) << "a checkpoint writer must keep at least one";
}

absl::Status CheckpointWriter::Write(int64_t step, absl::string_view metadata,
                                     const std::vector<CheckpointFile>& files) {
  std::vector<CheckpointFileView> views;
  views.reserve(files.size());
  for (const CheckpointFile& f : files) views.push_back({f.name, f.data});
  return WriteViews(step, metadata, views);
}

absl::Status CheckpointWriter::WriteViews(
    int64_t step, absl::string_view metadata,
    absl::Span<const CheckpointFileView> files) {
  std::vector<std::string> names;
  for (const CheckpointFileView& f : files) names.emplace_back(f.name);
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStream> stream,
                   BeginStream(step, names));
  for (size_t i = 0; i < files.size(); ++i) {
    // In pieces, so a large table is not one giant syscall.
    for (size_t pos = 0; pos < files[i].data.size(); pos += kWriteChunkBytes) {
      if (!stream->Append(i, files[i].data.substr(pos, kWriteChunkBytes))
               .ok()) {
        break;  // CommitStream returns it
      }
    }
  }
  return CommitStream(std::move(stream), metadata);
}

struct CheckpointStream::Blob {
  std::string name;
  absl::Mutex mu;
  std::unique_ptr<WritableFile> file ABSL_GUARDED_BY(mu);
  uint64_t size ABSL_GUARDED_BY(mu) = 0;
  uint32_t crc ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
};

CheckpointStream::CheckpointStream(int64_t step, std::string tmp)
    : step_(step), tmp_(std::move(tmp)) {}

CheckpointStream::~CheckpointStream() {
  for (auto& b : blobs_) {
    absl::MutexLock l(&b->mu);
    if (b->file != nullptr) b->file->Close().IgnoreError();
  }
}

absl::Status CheckpointStream::Append(size_t blob, absl::string_view data) {
  Blob& b = *blobs_.at(blob);
  absl::MutexLock l(&b.mu);
  if (!b.status.ok()) return b.status;
  if (data.empty()) return absl::OkStatus();
  b.status = b.file->Append(data);
  if (b.status.ok()) {
    b.crc = Crc32(data, b.crc);
    b.size += data.size();
  }
  return b.status;
}

void CheckpointStream::Fail(size_t blob, const absl::Status& why) {
  Blob& b = *blobs_.at(blob);
  absl::MutexLock l(&b.mu);
  if (b.status.ok()) b.status = why;
}

int64_t CheckpointStream::bytes() const {
  int64_t n = 0;
  for (const auto& b : blobs_) {
    absl::MutexLock l(&b->mu);
    n += static_cast<int64_t>(b->size);
  }
  return n;
}

absl::StatusOr<std::unique_ptr<CheckpointStream>> CheckpointWriter::BeginStream(
    int64_t step, const std::vector<std::string>& names) {
  if (step < 0 || step > kMaxCheckpointStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint step ", step, " is outside [0, ", kMaxCheckpointStep, "]"));
  }
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& name : names) {
    RETURN_IF_ERROR(ValidateName(name));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint file name \"", name, "\" appears twice"));
    }
  }
  const std::string prefix = absl::StrCat("checkpoint ", step, ": ");
  const std::string tmp = absl::StrCat(JoinPath(root_, CheckpointDirName(step)),
                                       kCheckpointTmpSuffix);
  auto stream =
      std::unique_ptr<CheckpointStream>(new CheckpointStream(step, tmp));
  absl::Status s = env_->CreateDir(root_);
  // A leftover from a crash or a failed write of this step.
  if (s.ok()) s = env_->FileExists(tmp);
  if (s.ok()) {
    s = env_->DeleteDir(tmp);
  } else if (absl::IsNotFound(s)) {
    s = absl::OkStatus();
  }
  if (s.ok()) s = env_->CreateDir(tmp);
  for (size_t i = 0; s.ok() && i < names.size(); ++i) {
    auto blob = std::make_unique<CheckpointStream::Blob>();
    blob->name = names[i];
    auto file = env_->NewWritableFile(JoinPath(tmp, names[i]));
    s = file.status();
    if (s.ok()) {
      absl::MutexLock l(&blob->mu);
      blob->file = std::move(*file);
    }
    stream->blobs_.push_back(std::move(blob));
  }
  if (!s.ok()) {
    stream.reset();
    if (env_->FileExists(tmp).ok()) env_->DeleteDir(tmp).IgnoreError();
    return Annotate(s, prefix);
  }
  return stream;
}

absl::Status CheckpointWriter::FinishTmp(CheckpointStream* stream,
                                         absl::string_view metadata) {
  std::vector<ManifestEntry> entries;
  for (auto& b : stream->blobs_) {
    absl::MutexLock l(&b->mu);
    RETURN_IF_ERROR(b->status);
    RETURN_IF_ERROR(b->file->Sync());
    absl::Status closed = b->file->Close();
    b->file.reset();
    RETURN_IF_ERROR(closed);
    entries.push_back(ManifestEntry{b->name, b->size, b->crc});
  }
  uint32_t unused_crc;
  RETURN_IF_ERROR(WriteWholeFile(
      env_, JoinPath(stream->tmp_, kCheckpointManifestName),
      SerializeManifest(stream->step_, metadata, entries), &unused_crc));
  return env_->SyncDir(stream->tmp_);
}

void CheckpointWriter::AbortStream(std::unique_ptr<CheckpointStream> stream) {
  const std::string tmp = stream->tmp_;
  stream.reset();
  if (env_->FileExists(tmp).ok()) env_->DeleteDir(tmp).IgnoreError();
}

absl::Status CheckpointWriter::CommitStream(
    std::unique_ptr<CheckpointStream> stream, absl::string_view metadata) {
  const int64_t step = stream->step_;
  const std::string prefix = absl::StrCat("checkpoint ", step, ": ");
  const std::string tmp = stream->tmp_;
  absl::Status s = FinishTmp(stream.get(), metadata);
  stream.reset();
  if (s.ok()) s = Commit(tmp, JoinPath(root_, CheckpointDirName(step)));
  if (!s.ok()) {
    // Best effort: the next Write removes it anyway. After a failed
    // Commit, tmp holds either the new (never visible) checkpoint or, if
    // the swap happened and only a sync failed, the superseded one.
    if (env_->FileExists(tmp).ok()) env_->DeleteDir(tmp).IgnoreError();
    return Annotate(s, prefix);
  }
  RemoveOldAndStale(step);
  return absl::OkStatus();
}

absl::Status CheckpointWriter::Commit(const std::string& tmp,
                                      const std::string& final_dir) {
  absl::Status exists = env_->FileExists(final_dir);
  if (absl::IsNotFound(exists)) {
    RETURN_IF_ERROR(env_->RenameFile(tmp, final_dir));
    return env_->SyncDir(root_);
  }
  RETURN_IF_ERROR(exists);

  // Rewriting a step: swap, so ckpt-<step> always names a whole checkpoint.
  absl::Status s = env_->ExchangeFiles(tmp, final_dir);
  if (s.ok()) {
    RETURN_IF_ERROR(env_->SyncDir(root_));
    // tmp now holds the superseded checkpoint; if this fails the next
    // Write removes it.
    s = env_->DeleteDir(tmp);
    if (!s.ok()) LOG(WARNING) << "removing superseded " << tmp << ": " << s;
    return absl::OkStatus();
  }
  if (!absl::IsUnimplemented(s)) return s;

  // No atomic swap here: move the old one aside (a stale "*.tmp" name, so
  // it is never loaded and is cleaned up later), then rename.
  const std::string aside =
      absl::StrCat(final_dir, ".old", kCheckpointTmpSuffix);
  if (env_->FileExists(aside).ok()) RETURN_IF_ERROR(env_->DeleteDir(aside));
  RETURN_IF_ERROR(env_->RenameFile(final_dir, aside));
  s = env_->RenameFile(tmp, final_dir);
  if (!s.ok()) {
    // Put the old one back; if even that fails, say so loudly.
    absl::Status back = env_->RenameFile(aside, final_dir);
    if (!back.ok()) {
      LOG(ERROR) << "checkpoint " << final_dir << " is now only in " << aside
                 << " (restore failed: " << back << ")";
    }
    return s;
  }
  RETURN_IF_ERROR(env_->SyncDir(root_));
  s = env_->DeleteDir(aside);
  if (!s.ok()) LOG(WARNING) << "removing superseded " << aside << ": " << s;
  return absl::OkStatus();
}

void CheckpointWriter::RemoveOldAndStale(int64_t step) {
  std::vector<std::string> children;
  absl::Status s = env_->GetChildren(root_, &children);
  if (!s.ok()) {
    LOG(WARNING) << "checkpoint retention: " << s;
    return;
  }
  std::vector<std::pair<int64_t, std::string>> older;
  std::vector<std::string> remove;
  for (std::string& name : children) {
    int64_t st = ParseDirName(name);
    if (st >= 0 && st < step) {
      older.emplace_back(st, std::move(name));
    } else if (IsTmpDirName(name)) {
      remove.push_back(std::move(name));
    }
  }
  std::sort(older.begin(), older.end(), std::greater<>());
  // The one just written counts as one of `keep_`.
  for (size_t i = static_cast<size_t>(keep_ - 1); i < older.size(); ++i) {
    remove.push_back(std::move(older[i].second));
  }
  for (const std::string& name : remove) {
    std::string path = JoinPath(root_, name);
    s = env_->DeleteDir(path);
    if (!s.ok() && !absl::IsNotFound(s)) {
      LOG(WARNING) << "checkpoint retention: " << s;
    }
  }
  if (!remove.empty()) {
    s = env_->SyncDir(root_);
    if (!s.ok()) LOG(WARNING) << "checkpoint retention: " << s;
  }
}

// ---------------------------------------------------------------------------
// CheckpointReader

CheckpointReader::CheckpointReader(Env* env, std::string root_dir)
    : env_(env), root_(std::move(root_dir)) {
  CHECK(env_ != nullptr);
}

absl::StatusOr<std::vector<int64_t>> CheckpointReader::ListCandidateSteps()
    const {
  std::vector<std::string> children;
  absl::Status s = env_->GetChildren(root_, &children);
  if (absl::IsNotFound(s)) return std::vector<int64_t>{};
  RETURN_IF_ERROR(s);
  std::vector<int64_t> steps;
  for (const std::string& name : children) {
    int64_t step = ParseDirName(name);
    if (step >= 0) steps.push_back(step);
  }
  return steps;
}

absl::StatusOr<std::vector<int64_t>> CheckpointReader::ListComplete() const {
  ASSIGN_OR_RETURN(std::vector<int64_t> candidates, ListCandidateSteps());
  std::sort(candidates.begin(), candidates.end());
  std::vector<int64_t> steps;
  for (int64_t step : candidates) {
    std::string dir = JoinPath(root_, CheckpointDirName(step));
    absl::StatusOr<Manifest> m = ReadManifest(env_, dir);
    absl::Status s = m.ok() ? CheckManifestStep(*m, step, dir) : m.status();
    if (s.ok()) {
      steps.push_back(step);
    } else if (!IsSkippable(s)) {
      return s;
    }
  }
  return steps;
}

absl::StatusOr<CheckpointHeader> CheckpointReader::LoadHeader(
    int64_t step) const {
  if (step < 0 || step > kMaxCheckpointStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint step ", step, " is outside [0, ", kMaxCheckpointStep, "]"));
  }
  const std::string dir = JoinPath(root_, CheckpointDirName(step));
  const std::string path = JoinPath(dir, kCheckpointManifestName);
  std::string text;
  absl::Status s = env_->ReadFileToString(path, &text);
  if (absl::IsNotFound(s)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint of step ", step,
                                            ": ", path, " is missing"));
  }
  RETURN_IF_ERROR(s);
  ASSIGN_OR_RETURN(Manifest m, ParseManifest(text, path));
  RETURN_IF_ERROR(CheckManifestStep(m, step, dir));
  CheckpointHeader h;
  h.step = step;
  h.metadata = std::move(m.metadata);
  h.manifest_crc = Crc32(text);
  for (const ManifestEntry& e : m.files) h.bytes += e.size;
  return h;
}

absl::StatusOr<LoadedCheckpoint> CheckpointReader::Load(int64_t step) const {
  if (step < 0 || step > kMaxCheckpointStep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint step ", step, " is outside [0, ", kMaxCheckpointStep, "]"));
  }
  const std::string dir = JoinPath(root_, CheckpointDirName(step));
  absl::Status s = env_->FileExists(dir);
  if (absl::IsNotFound(s)) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint of step ", step, ": ", dir, " is missing"));
  }
  RETURN_IF_ERROR(s);
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(env_, dir));
  RETURN_IF_ERROR(CheckManifestStep(m, step, dir));

  LoadedCheckpoint out;
  out.step = step;
  out.metadata = std::move(m.metadata);
  out.files.resize(m.files.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestEntry& e = m.files[i];
    const std::string path = JoinPath(dir, e.name);
    CheckpointFile& f = out.files[i];
    f.name = e.name;
    s = env_->ReadFileToString(path, &f.data);
    if (absl::IsNotFound(s)) {
      return absl::DataLossError(
          absl::StrCat(path, ": missing (listed in the manifest)"));
    }
    RETURN_IF_ERROR(s);
    if (f.data.size() != e.size) {
      return absl::DataLossError(absl::StrCat(path, ": size ", f.data.size(),
                                              " != manifest ", e.size));
    }
    uint32_t crc = Crc32(f.data);
    if (crc != e.crc) {
      return absl::DataLossError(absl::StrCat(path, ": crc32 0x", Hex32(crc),
                                              " != manifest 0x", Hex32(e.crc)));
    }
  }
  return out;
}

absl::StatusOr<LoadedCheckpoint> CheckpointReader::LoadNewest() const {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListCandidateSteps());
  std::sort(steps.begin(), steps.end(), std::greater<>());
  for (int64_t step : steps) {
    absl::StatusOr<LoadedCheckpoint> c = Load(step);
    if (c.ok() || !IsSkippable(c.status())) return c;
    LOG(WARNING) << "skipping checkpoint of step " << step << ": "
                 << c.status();
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in ", root_));
}

}  // namespace shardps
