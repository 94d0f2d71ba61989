#include "common/auth/token_authority.h"

#include <dirent.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/job_id.h"
#include "base/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

constexpr char kTokenSuffix[] = ".token";

absl::Status Invalid(absl::string_view flag, const std::string& path,
                     absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", path, ": ", what));
}

constexpr size_t kMaxPeerAddress = 256;

// What the identities file lists for `token`, if `token` is set.
bool Listed(const absl::flat_hash_map<std::string, std::string>& identities,
            absl::string_view token) {
  return !token.empty() && identities.contains(TokenSha256Hex(token));
}

// The PERMISSION_DENIED for a known token, `admin` or a `peer`'s or
// neither, that does not cover call `call_class` on job `job_id`.
absl::Status NotCovered(const TokenAuthority::Options& options,
                        CallClass call_class, absl::string_view job_id,
                        bool admin, bool peer) {
  const bool identities = !options.peer_identities_file.empty();
  if (call_class == CallClass::kPeer) {
    if (identities) {
      return absl::PermissionDeniedError(absl::StrCat(
          "calls between pservers need a pserver's own token, listed in "
          "--peer_identities_file=",
          options.peer_identities_file, "; this token is not listed"));
    }
    return absl::PermissionDeniedError(
        options.peer_token.empty()
            ? "this pserver takes no calls between pservers: it has per-job "
              "tokens and no --peer_token_file"
            : "calls between pservers need the pservers' --peer_token_file; "
              "this token is not it");
  }
  if (admin) {
    return absl::PermissionDeniedError(
        "the admin token reads jobs' status (GetStatus) and nothing else");
  }
  if (peer) {
    return absl::PermissionDeniedError(
        "the peer token makes calls between pservers only");
  }
  // The same words whether the job exists or not.
  return absl::PermissionDeniedError(absl::StrCat(
      "this token does not cover job '", job_id.substr(0, 64), "'"));
}

}  // namespace

std::string TokenSha256Hex(absl::string_view token) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(token.data(), token.size(), md, &n, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < n; ++i) {
    hex.push_back(kHex[md[i] >> 4]);
    hex.push_back(kHex[md[i] & 15]);
  }
  return hex;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of `a` is compared (against b's bytes, cycled), so the time
  // depends on the presented length only, never on where a mismatch is.
  unsigned diff = a.size() == b.size() ? 0 : 1;
  if (b.empty()) return a.empty();
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^
            static_cast<unsigned char>(b[i % b.size()]);
  }
  return diff == 0;
}

namespace {

// The whole of file `path` (named by flag `flag` in messages), at most
// kMaxSecretFileBytes.
absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag,
                                          const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Invalid(flag, path, "cannot open the file");
  std::string data(kMaxSecretFileBytes + 1, '\0');
  f.read(data.data(), data.size());
  if (f.bad()) return Invalid(flag, path, "cannot read the file");
  data.resize(f.gcount());
  if (data.size() > kMaxSecretFileBytes) {
    return Invalid(flag, path,
                   absl::StrCat("larger than ", kMaxSecretFileBytes,
                                " bytes; is this the right file?"));
  }
  return data;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
                                          const std::string& path) {
  ASSIGN_OR_RETURN(const std::string data, ReadSmallFile(flag, path));
  absl::string_view token = absl::StripTrailingAsciiWhitespace(data);
  if (token.empty()) {
    return Invalid(flag, path,
                   "the file is empty (it must hold the secret, e.g. from "
                   "`openssl rand -hex 32`)");
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return Invalid(
          flag, path,
          absl::StrCat("the token may hold only printable ASCII without "
                       "spaces (gRPC metadata carries nothing else); found "
                       "byte ",
                       static_cast<int>(static_cast<unsigned char>(c))));
    }
  }
  return std::string(token);
}

absl::StatusOr<std::unique_ptr<TokenAuthority>> TokenAuthority::Create(
    Options options) {
  if (!options.shared_token.empty() && !options.token_dir.empty()) {
    return absl::InvalidArgumentError(
        "--auth_token_file and --auth_token_dir: give one (a token for every "
        "job, or one per job)");
  }
  if (!options.admin_token.empty() &&
      (ConstantTimeEquals(options.admin_token, options.shared_token) ||
       ConstantTimeEquals(options.admin_token, options.peer_token))) {
    return absl::InvalidArgumentError(
        "--admin_token_file holds the same token as --auth_token_file or "
        "--peer_token_file: each role needs its own secret");
  }
  if (!options.peer_token.empty() &&
      ConstantTimeEquals(options.peer_token, options.shared_token)) {
    return absl::InvalidArgumentError(
        "--peer_token_file holds the same token as --auth_token_file: the "
        "trainers could then act as pservers; give the pservers their own");
  }
  JobTokens tokens;
  if (!options.token_dir.empty()) {
    auto read = ReadDirectory(options);
    if (!read.ok()) return read.status();
    tokens = *std::move(read);
  }
  PeerIdentities identities;
  if (!options.peer_identities_file.empty()) {
    if (options.peer_token.empty()) {
      return absl::InvalidArgumentError(
          "--peer_identities_file needs --peer_token_file: this pserver's "
          "own token, which it presents to the others");
    }
    ASSIGN_OR_RETURN(identities, ReadIdentities(options));
    if (!Listed(identities, options.peer_token)) {
      return Invalid("peer_identities_file", options.peer_identities_file,
                     absl::StrCat("--peer_token_file's token is not listed "
                                  "(its SHA-256 is ",
                                  TokenSha256Hex(options.peer_token),
                                  "): list every pserver's address with its "
                                  "token's hash, this one's too"));
    }
    for (const auto& [job, token] : tokens) {
      if (Listed(identities, token)) {
        return Invalid("peer_identities_file", options.peer_identities_file,
                       absl::StrCat("lists the hash of job ", job,
                                    "'s token: each role needs its own "
                                    "secret"));
      }
    }
  }
  return std::unique_ptr<TokenAuthority>(new TokenAuthority(
      std::move(options), std::move(tokens), std::move(identities)));
}

TokenAuthority::TokenAuthority(Options options, JobTokens job_tokens,
                               PeerIdentities identities)
    : options_(std::move(options)),
      job_tokens_(std::move(job_tokens)),
      identities_(std::move(identities)),
      last_scan_(absl::Now()) {}

absl::StatusOr<TokenAuthority::PeerIdentities> TokenAuthority::ReadIdentities(
    const Options& options) {
  const std::string& path = options.peer_identities_file;
  constexpr absl::string_view kFlag = "peer_identities_file";
  ASSIGN_OR_RETURN(const std::string data, ReadSmallFile(kFlag, path));
  PeerIdentities identities;
  absl::flat_hash_map<std::string, int> line_of;  // address -> line
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(data, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](absl::string_view what) {
      return Invalid(kFlag, path, absl::StrCat("line ", line_no, ": ", what));
    };
    if (f.size() != 2 || f[1].size() != 64 ||
        !std::all_of(f[1].begin(), f[1].end(), absl::ascii_isxdigit)) {
      return bad(
          "not \"<address> <SHA-256 of its token, 64 hex digits>\" (as "
          "scripts/cluster/make_peer_tokens.sh writes)");
    }
    if (f[0].size() > kMaxPeerAddress) return bad("an address over 256 bytes");
    const std::string hash = absl::AsciiStrToLower(f[1]);
    const std::string address(f[0]);
    if (auto [it, added] = line_of.emplace(address, line_no); !added) {
      return bad(
          absl::StrCat(address, " is listed on line ", it->second, " too"));
    }
    if (!identities.emplace(hash, address).second) {
      return bad(absl::StrCat("the same token hash as ", identities[hash],
                              ": each pserver needs its own secret"));
    }
  }
  for (const std::string* other :
       {&options.shared_token, &options.admin_token}) {
    if (Listed(identities, *other)) {
      return Invalid(kFlag, path,
                     "lists the hash of --auth_token_file's or "
                     "--admin_token_file's token: each role needs its own "
                     "secret");
    }
  }
  return identities;
}

absl::StatusOr<TokenAuthority::JobTokens> TokenAuthority::ReadDirectory(
    const Options& options) {
  const std::string& dir = options.token_dir;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return Invalid(
        "auth_token_dir", dir,
        absl::StrCat("cannot read the directory: ", std::strerror(errno)));
  }
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (absl::ConsumeSuffix(&name, kTokenSuffix)) {
      names.emplace_back(e->d_name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  JobTokens tokens;
  std::vector<std::pair<std::string, std::string>> owners;  // token, file
  for (const std::string& file : names) {
    const std::string path = absl::StrCat(dir, "/", file);
    absl::string_view job = file;
    job.remove_suffix(std::strlen(kTokenSuffix));
    if (absl::Status s = ValidateJobId(job); !s.ok()) {
      return Invalid("auth_token_dir", dir,
                     absl::StrCat(file, ": not <job id>.token: ", s.message()));
    }
    auto token = ReadTokenFile("auth_token_dir", path);
    if (!token.ok()) {
      // "--auth_token_dir=DIR: FILE: what", as the other problems.
      return Invalid(
          "auth_token_dir", dir,
          absl::StrCat(file, ": ",
                       absl::StripPrefix(
                           token.status().message(),
                           absl::StrCat("--auth_token_dir=", path, ": "))));
    }
    if (ConstantTimeEquals(*token, options.admin_token) ||
        ConstantTimeEquals(*token, options.peer_token)) {
      return Invalid("auth_token_dir", dir,
                     absl::StrCat(file,
                                  ": the same token as --admin_token_file or "
                                  "--peer_token_file: each role needs its own "
                                  "secret"));
    }
    for (const auto& [other, other_file] : owners) {
      if (ConstantTimeEquals(*token, other)) {
        return Invalid("auth_token_dir", dir,
                       absl::StrCat(file, ": the same token as ", other_file,
                                    ": each job needs its own secret"));
      }
    }
    owners.emplace_back(*token, file);
    tokens.emplace(std::string(job), *std::move(token));
  }
  return tokens;
}

void TokenAuthority::MaybeRescan(absl::Time now) {
  if ((options_.token_dir.empty() && options_.peer_identities_file.empty()) ||
      now - last_scan_ < options_.rescan_interval) {
    return;
  }
  last_scan_ = now;
  absl::StatusOr<JobTokens> tokens = job_tokens_;
  if (!options_.token_dir.empty()) tokens = ReadDirectory(options_);
  absl::StatusOr<PeerIdentities> identities = identities_;
  if (!options_.peer_identities_file.empty()) {
    identities = ReadIdentities(options_);
    if (identities.ok() && !Listed(*identities, options_.peer_token)) {
      identities =
          Invalid("peer_identities_file", options_.peer_identities_file,
                  "no longer lists --peer_token_file's token");
    }
  }
  if (tokens.ok() && identities.ok()) {
    for (const auto& [job, token] : *tokens) {
      if (!Listed(*identities, token)) continue;
      tokens = Invalid("auth_token_dir", options_.token_dir,
                       absl::StrCat("job ", job,
                                    "'s token is also a pserver's "
                                    "(--peer_identities_file): each role needs "
                                    "its own secret"));
      break;
    }
  }
  // What stays broken is said once, not at every scan: a file stays
  // broken until someone fixes it.
  std::string errors;
  if (tokens.ok()) {
    job_tokens_ = *std::move(tokens);
  } else {
    absl::StrAppend(&errors, tokens.status().message(),
                    "; the job tokens read before stay in force until the "
                    "directory reads cleanly. ");
  }
  if (identities.ok()) {
    identities_ = *std::move(identities);
  } else {
    absl::StrAppend(&errors, identities.status().message(),
                    "; the pservers' identities read before stay in force "
                    "until the file reads cleanly. ");
  }
  if (errors != last_error_) {
    last_error_ = errors;
    if (!errors.empty()) LOG(ERROR) << errors;
  }
}

bool TokenAuthority::IsKnown(absl::string_view token) const {
  bool known = ConstantTimeEquals(token, options_.shared_token) ||
               ConstantTimeEquals(token, options_.admin_token) ||
               ConstantTimeEquals(token, options_.peer_token);
  for (const auto& [job, job_token] : job_tokens_) {
    known = ConstantTimeEquals(token, job_token) || known;
  }
  return (known || Listed(identities_, token)) && !token.empty();
}

absl::Status TokenAuthority::Check(std::optional<absl::string_view> token,
                                   absl::string_view job_id,
                                   CallClass call_class, std::string* caller) {
  if (!token.has_value()) {
    return absl::UnauthenticatedError(
        "this pserver needs a token: start the client with its job's "
        "--auth_token_file");
  }
  const absl::string_view t = *token;
  // With identities, a pserver's token is known by its hash (below).
  const bool identities = !options_.peer_identities_file.empty();
  bool peer = !identities && !options_.peer_token.empty() &&
              ConstantTimeEquals(t, options_.peer_token);
  const bool shared = !options_.shared_token.empty() &&
                      ConstantTimeEquals(t, options_.shared_token);
  if (call_class == CallClass::kPeer && !identities) {
    if (peer || (shared && options_.peer_token.empty())) {
      return absl::OkStatus();
    }
  } else if (call_class != CallClass::kPeer && shared) {
    return absl::OkStatus();
  }
  const bool admin = !options_.admin_token.empty() &&
                     ConstantTimeEquals(t, options_.admin_token);
  if (admin && call_class == CallClass::kStatus) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  MaybeRescan(absl::Now());
  if (identities && !t.empty()) {
    auto it = identities_.find(TokenSha256Hex(t));
    if (it != identities_.end()) {
      peer = true;
      if (call_class == CallClass::kPeer) {
        if (caller != nullptr) *caller = it->second;
        return absl::OkStatus();
      }
    }
  }
  if (call_class != CallClass::kPeer) {
    auto it = job_tokens_.find(job_id);
    if (it != job_tokens_.end() && ConstantTimeEquals(t, it->second)) {
      return absl::OkStatus();
    }
  }
  if (!IsKnown(t)) {
    return absl::UnauthenticatedError(
        "wrong token: the client's --auth_token_file holds no token this "
        "pserver knows");
  }
  return NotCovered(options_, call_class, job_id, admin, peer);
}

std::vector<std::string> TokenAuthority::JobsWithTokens() {
  absl::MutexLock l(&mu_);
  std::vector<std::string> jobs;
  for (const auto& [job, token] : job_tokens_) jobs.push_back(job);
  std::sort(jobs.begin(), jobs.end());
  return jobs;
}

std::string TokenAuthority::Describe() {
  std::vector<std::string> parts;
  if (!options_.shared_token.empty()) parts.push_back("token");
  if (!options_.token_dir.empty()) {
    absl::MutexLock l(&mu_);
    parts.push_back(absl::StrCat("per-job tokens for ", job_tokens_.size(),
                                 " jobs in ", options_.token_dir));
  }
  if (!options_.admin_token.empty()) parts.push_back("an admin token");
  if (!options_.peer_identities_file.empty()) {
    absl::MutexLock l(&mu_);
    parts.push_back(absl::StrCat("peer tokens of ", identities_.size(),
                                 " pservers in ",
                                 options_.peer_identities_file));
  } else if (!options_.peer_token.empty()) {
    parts.push_back("a peer token");
  }
  if (parts.empty()) return "no token";
  return absl::StrJoin(parts, ", ");
}

}  // namespace shardps
