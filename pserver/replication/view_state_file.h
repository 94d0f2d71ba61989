#ifndef SHARDPS_PSERVER_REPLICATION_VIEW_STATE_FILE_H_
#define SHARDPS_PSERVER_REPLICATION_VIEW_STATE_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/storage/env.h"
#include "pserver/replication/view_consensus.h"

namespace shardps {

// A pserver's acceptor state on disk (docs/replication.md, "Views"): Paxos
// is safe across a restart only if what an acceptor promised or accepted
// survives it, so the state is saved before each answer. One binary file
// with a CRC32 (zlib) of its bytes, replaced atomically: written to
// `path`.tmp, synced, renamed, and the directory synced.

// Saves `state` at `path` (in an existing directory).
absl::Status SaveAcceptorState(Env* env, const std::string& path,
                               const AcceptorState& state);

// The state saved at `path`. NOT_FOUND when there is none (a new pserver:
// the caller starts from view 0); DATA_LOSS, naming the path and what is
// wrong, for a file that is truncated, corrupted or not such a file (the
// pserver must not vote then: it could break a promise).
absl::StatusOr<AcceptorState> LoadAcceptorState(Env* env,
                                                const std::string& path);

}  // namespace shardps

#endif  // SHARDPS_PSERVER_REPLICATION_VIEW_STATE_FILE_H_
