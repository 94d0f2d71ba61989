#include "pserver/checkpoint/checkpointer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

constexpr char kAbandonedSuffix[] = ".abandoned";
constexpr char kAbandonedGenerationMark[] = ".abandoned-g";

// The rollback that set `name` aside: its generation, 0 for the old name
// without one; nullopt for any other name.
std::optional<uint64_t> AbandonedBy(absl::string_view name) {
  if (absl::EndsWith(name, kAbandonedSuffix)) return 0;
  const size_t at = name.rfind(kAbandonedGenerationMark);
  uint64_t generation;
  if (at == absl::string_view::npos ||
      !absl::SimpleAtoi(name.substr(at + std::strlen(kAbandonedGenerationMark)),
                        &generation)) {
    return std::nullopt;
  }
  return generation;
}

}  // namespace

Checkpointer::Checkpointer(Env* env, std::string dir, int keep, int full_every)
    : env_(env),
      dir_(std::move(dir)),
      keep_(keep),
      full_every_(std::max(1, full_every)),
      // With deltas the writer keeps everything; PruneChains removes whole
      // chains.
      writer_(env, dir_, full_every > 1 ? (1 << 30) : keep) {}

Checkpointer::~Checkpointer() {
  absl::MutexLock l(&mu_);
  JoinWriter();
}

void Checkpointer::JoinWriter() {
  if (thread_.joinable()) thread_.join();
}

absl::Status Checkpointer::WaitForWriter(int64_t step) {
  const absl::Time wait_start = absl::Now();
  JoinWriter();
  absl::Status previous;
  {
    absl::MutexLock w(&write_mu_);
    previous = last_status_;
  }
  const absl::Duration waited = absl::Now() - wait_start;
  if (waited > absl::Seconds(1)) {
    LOG(WARNING) << "checkpoint of step " << step << " waited "
                 << absl::FormatDuration(waited)
                 << " for the previous write to finish";
  }
  return previous;
}

void Checkpointer::Finished(int64_t step, const absl::Status& s, int64_t bytes,
                            absl::Time start) {
  const absl::Time end = absl::Now();
  {
    absl::MutexLock st(&stats_mu_);
    if (s.ok()) {
      ++stats_.written;
      stats_.last_step = step;
      stats_.last_bytes = bytes;
      stats_.last_duration = end - start;
      stats_.last_time = end;
    } else {
      ++stats_.failed;
    }
  }
  if (s.ok()) {
    LOG(INFO) << absl::StrFormat(
        "checkpoint of step %d written to %s (%.2f MB in %.0f ms)", step, dir_,
        bytes / 1e6, absl::ToDoubleMilliseconds(end - start));
  } else {
    LOG(ERROR) << "checkpoint of step " << step << " failed: " << s
               << " (the previous one is kept)";
  }
  last_status_ =
      s.ok() ? s
             : absl::Status(s.code(),
                            absl::StrCat("checkpoint of step ", step, " to ",
                                         dir_, ": ", s.message()));
  failure_ = last_status_;
  // A streaming write that failed part-way had not written all it needed:
  // the last whole one's size is the better guess of what it needs.
  int64_t last_bytes;
  {
    absl::MutexLock st(&stats_mu_);
    last_bytes = stats_.last_bytes;
  }
  failed_bytes_ = s.ok() ? 0 : std::max(bytes, last_bytes);
  if (s.ok() && on_written_) on_written_(step);
}

absl::Status Checkpointer::Save(StoreSnapshot snapshot) {
  absl::MutexLock l(&mu_);
  const absl::Status previous = WaitForWriter(snapshot.info.step());
  thread_ = std::thread([this, snap = std::move(snapshot)]() {
    const absl::Time start = absl::Now();
    std::vector<CheckpointFileView> views;
    int64_t bytes = 0;
    for (const auto& [name, data] : snap.files) {
      views.push_back(CheckpointFileView{name, data});
      bytes += static_cast<int64_t>(data.size());
    }
    absl::MutexLock w(&write_mu_);
    absl::Status s = writer_.WriteViews(snap.info.step(),
                                        snap.info.SerializeAsString(), views);
    Finished(snap.info.step(), s, bytes, start);
    // The store kept no changes since it: no delta can build on it.
    chain_base_ = -1;
    if (s.ok() && full_every_ > 1) PruneChains(snap.info.step());
  });
  return previous;
}

namespace {

// A streaming save's units go to the checkpoint's blob of their table
// (blob i is table i's); a failed append is kept by the stream, which
// CommitStream returns.
class StreamSink : public SaveSink {
 public:
  explicit StreamSink(CheckpointStream* stream) : stream_(stream) {}
  void Append(uint32_t table_id, absl::string_view record) override {
    stream_->Append(table_id, record).IgnoreError();
  }
  void Fail(uint32_t table_id, const absl::Status& why) override {
    stream_->Fail(table_id, why);
  }

 private:
  CheckpointStream* const stream_;
};

}  // namespace

void Checkpointer::AdvanceChain(int64_t step, const absl::Status& s,
                                int64_t delta_base) {
  // A failed save took the store's changes with it: the next is full.
  chain_base_ = s.ok() ? step : -1;
  if (s.ok()) {
    auto header = CheckpointReader(env_, dir_).LoadHeader(step);
    if (header.ok()) {
      chain_base_crc_ = header->manifest_crc;
    } else {
      chain_base_ = -1;
    }
  }
  chain_deltas_ = delta_base >= 0 ? chain_deltas_ + 1 : 0;
  if (s.ok() && full_every_ > 1 && delta_base < 0) PruneChains(step);
}

void Checkpointer::FinishStream(
    int64_t step, absl::Time start, int64_t delta_base, CheckpointInfo info,
    std::unique_ptr<CheckpointStream> stream,
    const std::function<absl::Status()>& write_rest) {
  // Every unit written or disarmed: nothing refers to the sink now.
  absl::Status s = write_rest();
  const int64_t bytes = stream->bytes();
  absl::MutexLock w(&write_mu_);
  if (s.ok()) {
    s = writer_.CommitStream(std::move(stream), info.SerializeAsString());
  } else {
    writer_.AbortStream(std::move(stream));
  }
  if (absl::IsAborted(s)) {
    // Called off (a K-of-N save that a rollback, a newer request or the
    // job's end overtook): not a failed write, and nothing to tell.
    LOG(WARNING) << s.message();
  } else {
    Finished(step, s, bytes, start);
  }
  AdvanceChain(step, s, delta_base);
}

absl::Status Checkpointer::SaveStreaming(
    int64_t step, size_t num_tables, const BeginFn& begin,
    std::function<absl::Status()> write_rest, absl::Status* previous) {
  absl::MutexLock l(&mu_);
  *previous = WaitForWriter(step);
  std::vector<std::string> names;
  for (size_t t = 0; t < num_tables; ++t) names.push_back(TableFileName(t));
  const absl::Time start = absl::Now();
  std::unique_ptr<CheckpointStream> stream;
  {
    absl::MutexLock w(&write_mu_);
    auto begun = writer_.BeginStream(step, names);
    if (!begun.ok()) {
      // As a write that failed: counted, logged, and told at the next
      // request.
      Finished(step, begun.status(), 0, start);
      return absl::OkStatus();
    }
    stream = std::move(*begun);
  }
  int64_t delta_base = -1;
  uint32_t base_crc = 0;
  {
    absl::MutexLock w(&write_mu_);
    if (full_every_ > 1 && chain_base_ >= 0 && chain_base_ < step &&
        chain_deltas_ < full_every_ - 1) {
      delta_base = chain_base_;
      base_crc = chain_base_crc_;
    }
  }
  auto sink = std::make_unique<StreamSink>(stream.get());
  absl::StatusOr<CheckpointInfo> info =
      begin(sink.get(), delta_base, full_every_ > 1);
  if (!info.ok()) {
    // Nothing was marked: the stream goes, with its .tmp folder.
    absl::MutexLock w(&write_mu_);
    writer_.AbortStream(std::move(stream));
    return info.status();
  }
  if (delta_base >= 0) info->set_delta_base_manifest_crc(base_crc);
  // The lambda holds the sink until the writer is done with it.
  thread_ = std::thread([this, step, start, delta_base, info = std::move(*info),
                         stream = std::move(stream), sink = std::move(sink),
                         write_rest = std::move(write_rest)]() mutable {
    FinishStream(step, start, delta_base, std::move(info), std::move(stream),
                 write_rest);
  });
  return absl::OkStatus();
}

void Checkpointer::ForceFull() {
  absl::MutexLock l(&mu_);
  JoinWriter();
  absl::MutexLock w(&write_mu_);
  chain_base_ = -1;
}

void Checkpointer::PruneChains(int64_t step) {
  CheckpointReader reader(env_, dir_);
  auto steps = reader.ListComplete();
  if (!steps.ok()) return;
  std::vector<int64_t> fulls;
  std::map<int64_t, int64_t> base_of;  // delta -> the step it builds on
  for (int64_t s : *steps) {
    if (s > step) continue;
    auto header = reader.LoadHeader(s);
    CheckpointInfo info;
    if (!header.ok() || !info.ParseFromString(header->metadata)) continue;
    if (info.delta()) {
      base_of[s] = info.delta_base();
    } else {
      fulls.push_back(s);
    }
  }
  if (static_cast<int>(fulls.size()) <= keep_) return;
  const int64_t oldest_kept = fulls[fulls.size() - keep_];
  // What stays: the newest `keep_` full ones and everything after the
  // oldest of them, with every checkpoint a kept delta builds on, however
  // its steps are ordered.
  std::set<int64_t> keep;
  for (int64_t s : *steps) {
    if (s >= oldest_kept) keep.insert(s);
  }
  for (int64_t s : std::vector<int64_t>(keep.begin(), keep.end())) {
    for (auto it = base_of.find(s); it != base_of.end();
         it = base_of.find(it->second)) {
      if (!keep.insert(it->second).second) break;
    }
  }
  bool removed = false;
  for (int64_t s : *steps) {
    if (s > step || keep.count(s) != 0) continue;
    const std::string path = JoinPath(dir_, CheckpointDirName(s));
    absl::Status d = env_->DeleteDir(path);
    if (!d.ok()) LOG(WARNING) << "checkpoint retention: " << d;
    removed = true;
  }
  if (!removed) return;
  if (absl::Status d = env_->SyncDir(dir_); !d.ok()) {
    LOG(WARNING) << "checkpoint retention: " << d;
  }
}

absl::StatusOr<std::vector<StoreSnapshot>> Checkpointer::LoadChain(
    int64_t step) const {
  std::vector<StoreSnapshot> chain;
  int64_t at = step;
  uint32_t want_crc = 0;  // the MANIFEST CRC the link at `at` must have
  for (;;) {
    auto snap = Load(at);
    if (!snap.ok()) {
      if (chain.empty()) return snap.status();
      return absl::DataLossError(
          absl::StrCat("the checkpoint of step ", step, " is a delta on step ",
                       at, ", which does not load: ", snap.status().message()));
    }
    if (want_crc != 0) {
      auto header = CheckpointReader(env_, dir_).LoadHeader(at);
      if (!header.ok() || header->manifest_crc != want_crc) {
        return absl::DataLossError(absl::StrCat(
            "the checkpoint of step ", step, " is a delta on step ", at,
            ", and the checkpoint of step ", at,
            " there is not the one it "
            "was built on (renamed back or written again)"));
      }
    }
    const bool delta = snap->info.delta();
    const int64_t base = snap->info.delta_base();
    want_crc = snap->info.delta_base_manifest_crc();
    chain.push_back(std::move(*snap));
    if (!delta) break;
    if (base < 0 || base >= at) {
      return absl::DataLossError(absl::StrCat("the checkpoint of step ", at,
                                              " is a delta on step ", base,
                                              ", not an earlier one"));
    }
    at = base;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

absl::StatusOr<std::vector<StoreSnapshot>> Checkpointer::LoadNewestChain()
    const {
  ASSIGN_OR_RETURN(std::vector<int64_t> steps, Steps());
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    auto chain = LoadChain(*it);
    if (chain.ok()) return chain;
    if (!absl::IsDataLoss(chain.status()) &&
        !absl::IsNotFound(chain.status())) {
      return chain.status();
    }
    LOG(WARNING) << "skipping the checkpoint of step " << *it << " in " << dir_
                 << ": " << chain.status().message();
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir_));
}

absl::Status Checkpointer::CheckRoom() {
  absl::MutexLock l(&mu_);
  JoinWriter();
  absl::MutexLock w(&write_mu_);
  if (failure_.ok()) return absl::OkStatus();
  absl::StatusOr<uint64_t> free = env_->FreeBytes(dir_);
  // Where the space cannot be told, the write itself finds out.
  if (!free.ok()) return absl::OkStatus();
  const uint64_t need =
      static_cast<uint64_t>(failed_bytes_) + failed_bytes_ / 10;
  if (*free >= need) return absl::OkStatus();
  last_status_ = absl::OkStatus();  // told now
  {
    absl::MutexLock st(&stats_mu_);
    ++stats_.no_room;
  }
  absl::Status no_room = absl::ResourceExhaustedError(absl::StrFormat(
      "%s has %.2f MB free, and the last write needed %.2f MB (%s); no "
      "checkpoint is taken until there is room",
      dir_, *free / 1e6, failed_bytes_ / 1e6, failure_.message()));
  LOG(WARNING) << "checkpoint request refused: " << no_room;
  return no_room;
}

absl::Status Checkpointer::Flush() {
  absl::MutexLock l(&mu_);
  JoinWriter();
  absl::MutexLock w(&write_mu_);
  return last_status_;
}

Checkpointer::Stats Checkpointer::stats() const {
  absl::MutexLock l(&stats_mu_);
  return stats_;
}

absl::StatusOr<std::vector<int64_t>> Checkpointer::Steps() const {
  return CheckpointReader(env_, dir_).ListComplete();
}

absl::StatusOr<StoreSnapshot> Checkpointer::FromLoaded(
    LoadedCheckpoint loaded) {
  StoreSnapshot snap;
  if (!snap.info.ParseFromString(loaded.metadata) ||
      snap.info.step() != loaded.step) {
    return absl::DataLossError(absl::StrCat("checkpoint of step ", loaded.step,
                                            ": unreadable metadata"));
  }
  for (CheckpointFile& f : loaded.files) {
    snap.files.emplace_back(std::move(f.name), std::move(f.data));
  }
  return snap;
}

absl::StatusOr<StoreSnapshot> Checkpointer::Load(int64_t step) const {
  auto loaded = CheckpointReader(env_, dir_).Load(step);
  if (!loaded.ok()) return loaded.status();
  return FromLoaded(std::move(*loaded));
}

absl::StatusOr<StoreSnapshot> Checkpointer::LoadNewest() const {
  auto loaded = CheckpointReader(env_, dir_).LoadNewest();
  if (!loaded.ok()) return loaded.status();
  return FromLoaded(std::move(*loaded));
}

absl::Status Checkpointer::QuarantineNewerThan(int64_t step) {
  absl::MutexLock l(&mu_);
  JoinWriter();
  auto steps = CheckpointReader(env_, dir_).ListComplete();
  if (!steps.ok()) return steps.status();
  bool moved = false;
  for (int64_t s : *steps) {
    if (s <= step) continue;
    moved = true;
    const std::string from = JoinPath(dir_, CheckpointDirName(s));
    const std::string to = from + ".damaged";
    absl::Status st = env_->RenameFile(from, to);
    if (!st.ok()) return st;
    LOG(WARNING) << "checkpoint of step " << s << " failed verification: "
                 << "moved to " << to;
  }
  return moved ? env_->SyncDir(dir_) : absl::OkStatus();
}

absl::StatusOr<uint64_t> Checkpointer::ReadGeneration() const {
  const std::string path = JoinPath(dir_, "GENERATION");
  std::string text;
  absl::Status s = env_->ReadFileToString(path, &text);
  if (!s.ok()) return s;
  uint64_t g = 0;
  if (!absl::SimpleAtoi(absl::StripSuffix(text, "\n"), &g)) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a generation number: '", text, "'"));
  }
  return g;
}

absl::Status Checkpointer::WriteGeneration(uint64_t generation) {
  absl::Status s = env_->CreateDir(dir_);
  if (!s.ok()) return s;
  const std::string path = JoinPath(dir_, "GENERATION");
  s = WriteFileAtomically(env_, path, absl::StrCat(generation, "\n"),
                          path + ".new");
  if (s.ok()) s = env_->SyncDir(dir_);
  return s;
}

absl::Status Checkpointer::SetAsideNewerThan(int64_t step,
                                             uint64_t generation) {
  absl::MutexLock l(&mu_);
  JoinWriter();
  std::vector<std::string> children;
  RETURN_IF_ERROR(env_->GetChildren(dir_, &children));
  // The timelines earlier rollbacks set aside, by generation: with this
  // one's, the newest `keep_` stay.
  std::map<uint64_t, std::vector<std::string>> abandoned;
  for (const std::string& name : children) {
    std::optional<uint64_t> by = AbandonedBy(name);
    if (by.has_value()) abandoned[*by].push_back(name);
  }
  int stay = std::max(0, keep_ - 1);
  for (auto it = abandoned.rbegin(); it != abandoned.rend(); ++it) {
    if (it->first != 0 && stay-- > 0) continue;
    for (const std::string& name : it->second) {
      RETURN_IF_ERROR(env_->DeleteDir(JoinPath(dir_, name)));
      LOG(WARNING) << "deleted " << JoinPath(dir_, name)
                   << " (set aside by an older rollback; the newest " << keep_
                   << " rollbacks' are kept)";
    }
  }
  auto steps = CheckpointReader(env_, dir_).ListComplete();
  if (!steps.ok()) return steps.status();
  for (int64_t s : *steps) {
    if (s <= step) continue;
    const std::string from = JoinPath(dir_, CheckpointDirName(s));
    const std::string to =
        absl::StrCat(from, kAbandonedGenerationMark, generation);
    RETURN_IF_ERROR(env_->RenameFile(from, to));
    LOG(WARNING) << "checkpoint of step " << s << " set aside as " << to
                 << " (the rollback to step " << step
                 << " abandoned its timeline; kept for the newest " << keep_
                 << " rollbacks)";
  }
  return env_->SyncDir(dir_);
}

}  // namespace shardps
