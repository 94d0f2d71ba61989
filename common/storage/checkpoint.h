#ifndef SHARDPS_COMMON_STORAGE_CHECKPOINT_H_
#define SHARDPS_COMMON_STORAGE_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/storage/env.h"

namespace shardps {

// Checkpoints made of named blobs, written so that a crash, a failed fsync or
// a full disk at any moment leaves the previous complete checkpoint loadable
// and the interrupted one invisible (docs/design.md, "Membership and faults").
//
// Layout under a root directory:
//   root/ckpt-000000000200/          a complete checkpoint of step 200
//       MANIFEST                     written last; see below
//       table-1.bin, ...             the blobs, as given (the pserver's names)
//   root/ckpt-000000000300.tmp/      one being written, or a crash's leftover:
//                                    never loaded, removed by the next Write
//
// A checkpoint is committed by renaming its finished, fsynced ".tmp"
// directory to its final name; the rename is the only step that makes it
// visible. MANIFEST is text, one item a line:
//   shardps-checkpoint 1             format name and version
//   step 200
//   metadata <bytes> <hex>           opaque caller bytes, hex ("-" if empty)
//   files <count>
//   file <name> <bytes> <crc32>      one line per blob, in Write's order;
//                                    crc32 is zlib's, 8 lowercase hex digits
//   checksum <crc32>                 zlib crc32 of every byte above this line
// docs/checkpoint_format.md describes this layout and the pserver's blobs.

inline constexpr absl::string_view kCheckpointDirPrefix = "ckpt-";
inline constexpr absl::string_view kCheckpointManifestName = "MANIFEST";
inline constexpr absl::string_view kCheckpointTmpSuffix = ".tmp";
// Steps are written as 12 decimal digits.
inline constexpr int64_t kMaxCheckpointStep = 999'999'999'999;

// "ckpt-000000000200" for step 200. REQUIRES: 0 <= step <= kMaxCheckpointStep.
std::string CheckpointDirName(int64_t step);

// A blob to write or a blob loaded. `name` is a plain file name: 1 to 255
// characters from [A-Za-z0-9._-], not starting with '.', not "MANIFEST".
struct CheckpointFile {
  std::string name;
  std::string data;
};

// The same, borrowing the bytes, so large tables need not be copied into a
// std::string before they are written.
struct CheckpointFileView {
  absl::string_view name;
  absl::string_view data;
};

// What a checkpoint's MANIFEST says, without its blobs.
struct CheckpointHeader {
  int64_t step = 0;
  std::string metadata;
  // zlib's CRC-32 of the whole MANIFEST file: names this exact checkpoint
  // (its blobs' sizes and CRCs are in it).
  uint32_t manifest_crc = 0;
  int64_t bytes = 0;  // the blobs' sizes, summed
};

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string metadata;
  std::vector<CheckpointFile> files;  // in the order they were written
};

class CheckpointWriter;

// A checkpoint being written blob by blob as its bytes come, so that no
// whole copy of a blob need be in memory (CheckpointWriter::BeginStream).
// Append is thread-safe; appends to one blob are serialised, in the order
// they are made. A failed append is kept and returned by Commit.
class CheckpointStream {
 public:
  ~CheckpointStream();
  CheckpointStream(const CheckpointStream&) = delete;
  CheckpointStream& operator=(const CheckpointStream&) = delete;

  // Appends `data` to blob `blob` (its index in BeginStream's names).
  absl::Status Append(size_t blob, absl::string_view data);
  // Fails blob `blob` with `why` (a part of it could not be read): Commit
  // returns it, and later appends are refused.
  void Fail(size_t blob, const absl::Status& why);
  int64_t step() const { return step_; }
  // Bytes appended so far, over all blobs.
  int64_t bytes() const;

 private:
  friend class CheckpointWriter;
  struct Blob;
  CheckpointStream(int64_t step, std::string tmp);

  const int64_t step_;
  const std::string tmp_;  // root/ckpt-<step>.tmp
  std::vector<std::unique_ptr<Blob>> blobs_;
};

// Writes checkpoints under one root directory and prunes old ones.
// Requires external synchronization; at most one CheckpointWriter (in any
// process) may write to a root at a time. Readers may run concurrently but
// can see a checkpoint disappear under them when retention removes it (they
// then get kNotFound or kDataLoss for it).
class CheckpointWriter {
 public:
  inline static constexpr int kDefaultKeep = 2;

  // `env` must outlive the writer. `root_dir` is created on the first Write
  // if missing. `keep` (>= 1, default 2) is how many complete checkpoints
  // with step <= the one just written are kept.
  CheckpointWriter(Env* env, std::string root_dir, int keep = kDefaultKeep);

  // Writes the checkpoint of `step` and commits it:
  //   1. root/ckpt-<step>.tmp/ is (re)created; each blob is appended in
  //      pieces, fsynced and closed; then MANIFEST likewise; then the
  //      directory is fsynced.
  //   2. The directory is renamed to root/ckpt-<step> and root is fsynced.
  //      If ckpt-<step> already exists it is swapped atomically with the
  //      new one (Env::ExchangeFiles) and then removed; where the file
  //      system cannot swap, the old one is first moved aside, so a crash
  //      in that short window loses step <step> (older steps stay).
  //   3. Only then are older complete checkpoints beyond `keep` removed
  //      (ranked by step; directories with a larger step than `step`, e.g.
  //      from an abandoned run, are left alone), and every stale "*.tmp"
  //      directory with them. Failures here are logged, not returned: the
  //      new checkpoint is already durable.
  // Returns OK once step 2 is done. kInvalidArgument for a bad step, blob
  // name or duplicate name; otherwise the Env's error, prefixed with
  // "checkpoint <step>: ", with the code unchanged. On any error the
  // previous complete checkpoints are untouched and the new one is not
  // visible (except when only the final fsync of root failed: it may then
  // be visible but not durable).
  absl::Status Write(int64_t step, absl::string_view metadata,
                     const std::vector<CheckpointFile>& files);
  // The same, with borrowed blobs; nothing is copied.
  absl::Status WriteViews(int64_t step, absl::string_view metadata,
                          absl::Span<const CheckpointFileView> files);

  // The same written as it comes: creates root/ckpt-<step>.tmp/ (removing a
  // leftover) with the blobs `names`, empty, for the caller to Append to
  // and then CommitStream. Errors as Write's.
  absl::StatusOr<std::unique_ptr<CheckpointStream>> BeginStream(
      int64_t step, const std::vector<std::string>& names);
  // Syncs and closes every blob, writes MANIFEST with `metadata`, and
  // commits and prunes as Write does. On any error (an Append's included)
  // the .tmp directory is removed and the previous checkpoints stay.
  absl::Status CommitStream(std::unique_ptr<CheckpointStream> stream,
                            absl::string_view metadata);
  // Gives the stream up: its .tmp directory is removed.
  void AbortStream(std::unique_ptr<CheckpointStream> stream);

  const std::string& root_dir() const { return root_; }

 private:
  absl::Status FinishTmp(CheckpointStream* stream, absl::string_view metadata);
  absl::Status Commit(const std::string& tmp, const std::string& final_dir);
  void RemoveOldAndStale(int64_t step);

  // Constant after construction.
  Env* const env_;  // not owned
  const std::string root_;
  const int keep_;
};

// Finds and verifies checkpoints under a root directory. Thread-safe (it
// holds no mutable state).
class CheckpointReader {
 public:
  // `env` must outlive the reader.
  CheckpointReader(Env* env, std::string root_dir);

  // The steps of the directories that hold a valid manifest (format,
  // checksum and step agree; the blobs are not read), oldest first. A
  // ".tmp" directory is never listed. A missing root gives an empty list.
  // Errors other than corruption (e.g. kPermissionDenied) are returned.
  absl::StatusOr<std::vector<int64_t>> ListComplete() const;

  // Loads the checkpoint of `step`, verifying the manifest's checksum and
  // each blob's presence, size and crc32. kNotFound if root/ckpt-<step>
  // does not exist; kDataLoss, naming the path and what mismatched, if it
  // is damaged (e.g. ".../ckpt-000000000200/table_3.bin: crc32 0x1234abcd
  // != manifest 0x5678ef01"); else the Env's error.
  absl::StatusOr<LoadedCheckpoint> Load(int64_t step) const;
  // The verified MANIFEST of `step` only; the blobs are neither read nor
  // checked. Errors as Load's.
  absl::StatusOr<CheckpointHeader> LoadHeader(int64_t step) const;

  // The newest checkpoint that verifies. A newer one that is damaged
  // (kDataLoss) or vanished (kNotFound) is skipped with a LOG(WARNING)
  // saying why; any other error (e.g. EIO reading a blob) is returned rather
  // than silently falling back to older state. kNotFound if there is none.
  absl::StatusOr<LoadedCheckpoint> LoadNewest() const;

  const std::string& root_dir() const { return root_; }

 private:
  // Steps of the complete-looking directory names under root, unsorted.
  absl::StatusOr<std::vector<int64_t>> ListCandidateSteps() const;

  // Constant after construction.
  Env* const env_;  // not owned
  const std::string root_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_STORAGE_CHECKPOINT_H_
