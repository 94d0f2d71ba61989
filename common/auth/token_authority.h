#ifndef SHARDPS_COMMON_AUTH_TOKEN_AUTHORITY_H_
#define SHARDPS_COMMON_AUTH_TOKEN_AUTHORITY_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardps {

// Secrets are small; a larger file is a mistake (or /dev/zero), not
// something to read to the end.
inline constexpr size_t kMaxSecretFileBytes = 1 << 20;

// The token in file `path` (named by flag `flag` in messages): its contents
// without trailing whitespace. INVALID_ARGUMENT naming the flag and the
// file when it cannot be read, is larger than kMaxSecretFileBytes, is
// empty, or holds anything but printable ASCII without spaces (all that
// gRPC metadata can carry).
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
                                          const std::string& path);

// True when a == b, in a time that depends on a.size() only: `a` is what a
// client presented, `b` the secret.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// The SHA-256 of `token` in lowercase hex: what --peer_identities_file
// lists for each pserver (scripts/cluster/make_peer_tokens.sh writes it).
std::string TokenSha256Hex(absl::string_view token);

// What a call is, for deciding who may make it.
enum class CallClass {
  kJob,     // a trainer's call on its job (every ParameterServer method but
            // GetStatus)
  kStatus,  // GetStatus: where a job stands, read only
  kPeer,    // a call between pservers (the Replication service)
};

// The tokens a pserver holds and who each lets in (docs/security.md, "Who
// may call"):
//  - a shared token (--auth_token_file): every job, for single-team fleets;
//  - or one token per job (--auth_token_dir: file <job id>.token holds job
//    <job id>'s), each reaching its job only;
//  - an admin token (--admin_token_file): GetStatus of every job, nothing
//    else (ps_status across teams' jobs);
//  - the pservers' peer token (--peer_token_file): the calls between
//    pservers, which no other token makes. Without one, the shared token
//    makes them too (single team); with per-job tokens, none does;
//  - or, with --peer_identities_file, a token per pserver: the file lists
//    each pserver's address with the SHA-256 of its token, a call between
//    pservers is let in when its token's hash is listed, and the caller is
//    known by that address (so a pserver cannot send as another). A
//    pserver holds its own token only.
// The directory and the identities file are read again, at most every
// `rescan_interval`, when a call is checked: a job's token (a pserver's)
// added, replaced or removed takes effect within it, without a restart.
// Thread-safe.
class TokenAuthority {
 public:
  struct Options {
    std::string shared_token;
    std::string token_dir;
    std::string admin_token;
    std::string peer_token;
    // Lines "<address> <sha256 hex of its token>"; empty: one peer token.
    std::string peer_identities_file;
    absl::Duration rescan_interval = absl::Seconds(2);
  };

  // INVALID_ARGUMENT, naming the file, for a shared token beside a token
  // directory, an unreadable directory, a <name>.token file whose name is
  // no valid job id or whose token is unreadable (ReadTokenFile), and a
  // token that two roles share (two jobs, or a job and the admin or the
  // peers: either could act as the other); with an identities file, one
  // that cannot be read (a line that is not "<address> <64 hex digits>",
  // an address or hash listed twice), that lacks --peer_token_file's
  // hash, or that lists another role's token.
  static absl::StatusOr<std::unique_ptr<TokenAuthority>> Create(
      Options options);

  // Whether call `call_class` naming job `job_id`, presenting `token`
  // (nullopt: none), may go on: OK; UNAUTHENTICATED without a token or
  // with one this pserver does not know; PERMISSION_DENIED with a known
  // token that does not cover the call. The answer for a job the token
  // does not cover is the same whether the job exists or not. With an
  // identities file, a call between pservers that is let in sets *peer
  // (when not null) to the caller's address.
  absl::Status Check(std::optional<absl::string_view> token,
                     absl::string_view job_id, CallClass call_class,
                     std::string* peer = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // The jobs with a token now, sorted (for the log and tests).
  std::vector<std::string> JobsWithTokens() ABSL_LOCKS_EXCLUDED(mu_);

  // One line for the log: "per-job tokens for 3 jobs in DIR, admin token,
  // peer token", "shared token", ...
  std::string Describe() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using JobTokens = absl::flat_hash_map<std::string, std::string>;
  // A pserver's token hash (hex) -> its address.
  using PeerIdentities = absl::flat_hash_map<std::string, std::string>;

  TokenAuthority(Options options, JobTokens job_tokens,
                 PeerIdentities identities);

  // The directory's tokens: INVALID_ARGUMENT as Create says.
  static absl::StatusOr<JobTokens> ReadDirectory(const Options& options);
  // The identities file: INVALID_ARGUMENT as Create says.
  static absl::StatusOr<PeerIdentities> ReadIdentities(const Options& options);
  // Reads the directory again when `rescan_interval` has passed; on an
  // error, logs it and keeps the tokens whose files still read well.
  void MaybeRescan(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which role `token` is, for the answer to a call it does not cover.
  bool IsKnown(absl::string_view token) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  absl::Mutex mu_;
  JobTokens job_tokens_ ABSL_GUARDED_BY(mu_);
  PeerIdentities identities_ ABSL_GUARDED_BY(mu_);
  absl::Time last_scan_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);  // the last scan's, logged
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_AUTH_TOKEN_AUTHORITY_H_
