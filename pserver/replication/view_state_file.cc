#include "pserver/replication/view_state_file.h"

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "common/storage/blob_io.h"

namespace shardps {
namespace {

constexpr uint32_t kMagic = 0x57565053;  // "SPVW", little-endian
constexpr uint32_t kFormat = 2;          // 2: views with joining and primaries
// No pserver list is this long; a larger count is a corrupt file.
constexpr uint32_t kMaxMembers = 1 << 16;

uint32_t Crc(absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data()),
            static_cast<uInt>(bytes.size())));
}

void AppendList(std::string* out, const std::vector<int>& list) {
  AppendPod(out, static_cast<uint32_t>(list.size()));
  for (int m : list) AppendPod(out, static_cast<int32_t>(m));
}

void AppendView(std::string* out, const View& v) {
  AppendPod(out, v.number);
  AppendList(out, v.members);
  AppendList(out, v.joining);
  AppendList(out, v.primaries);
}

void AppendBallot(std::string* out, const Ballot& b) {
  AppendPod(out, b.round);
  AppendPod(out, static_cast<int32_t>(b.proposer));
}

// A list of at most kMaxMembers indices >= `min`, ascending if `sorted`.
bool GetList(BlobReader* in, std::vector<int>* list, int min, bool sorted) {
  uint32_t n = 0;
  if (!in->Get(&n) || n > kMaxMembers) return false;
  list->clear();
  for (uint32_t i = 0; i < n; ++i) {
    int32_t m = 0;
    if (!in->Get(&m) || m < min || (sorted && i > 0 && m <= list->back())) {
      return false;
    }
    list->push_back(m);
  }
  return true;
}

bool GetView(BlobReader* in, View* v) {
  return in->Get(&v->number) && GetList(in, &v->members, 0, true) &&
         GetList(in, &v->joining, 0, true) &&
         GetList(in, &v->primaries, -1, false);
}

bool GetBallot(BlobReader* in, Ballot* b) {
  int32_t proposer = 0;
  if (!in->Get(&b->round) || !in->Get(&proposer)) return false;
  b->proposer = proposer;
  return true;
}

}  // namespace

absl::Status SaveAcceptorState(Env* env, const std::string& path,
                               const AcceptorState& state) {
  std::string bytes;
  AppendPod(&bytes, kMagic);
  AppendPod(&bytes, kFormat);
  AppendView(&bytes, state.committed);
  AppendBallot(&bytes, state.promised);
  AppendPod(&bytes, static_cast<uint8_t>(state.accepted.has_value()));
  AppendBallot(&bytes, state.accepted.value_or(Ballot{}));
  AppendView(&bytes, state.accepted_view);
  AppendPod(&bytes, Crc(bytes));
  const std::string tmp = path + ".tmp";
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->NewWritableFile(tmp));
  RETURN_IF_ERROR(f->Append(bytes));
  RETURN_IF_ERROR(f->Sync());
  RETURN_IF_ERROR(f->Close());
  RETURN_IF_ERROR(env->RenameFile(tmp, path));
  const size_t slash = path.rfind('/');
  return env->SyncDir(slash == std::string::npos ? "." : path.substr(0, slash));
}

absl::StatusOr<AcceptorState> LoadAcceptorState(Env* env,
                                                const std::string& path) {
  std::string bytes;
  absl::Status read = env->ReadFileToString(path, &bytes);
  if (absl::IsNotFound(read)) return read;
  RETURN_IF_ERROR(read);
  auto bad = [&path](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a usable view state (", what, ")"));
  };
  if (bytes.size() < 2 * sizeof(uint32_t) + sizeof(uint32_t)) {
    return bad("truncated");
  }
  const absl::string_view body(bytes.data(), bytes.size() - sizeof(uint32_t));
  uint32_t crc = 0;
  BlobReader tail(absl::string_view(bytes).substr(body.size()));
  tail.Get(&crc);
  if (crc != Crc(body)) return bad("checksum mismatch");
  BlobReader in(body);
  uint32_t magic = 0, format = 0;
  if (!in.Get(&magic) || magic != kMagic) return bad("wrong magic");
  if (!in.Get(&format) || format != kFormat) return bad("unknown format");
  AcceptorState state;
  uint8_t has_accepted = 0;
  Ballot accepted;
  if (!GetView(&in, &state.committed) || !GetBallot(&in, &state.promised) ||
      !in.Get(&has_accepted) || has_accepted > 1 ||
      !GetBallot(&in, &accepted) || !GetView(&in, &state.accepted_view) ||
      !in.done()) {
    return bad("malformed fields");
  }
  if (has_accepted) state.accepted = accepted;
  return state;
}

}  // namespace shardps
