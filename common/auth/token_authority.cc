#include "common/auth/token_authority.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/job_id.h"
#include "glog/logging.h"

namespace shardps {
namespace {

constexpr char kTokenSuffix[] = ".token";

absl::Status Invalid(absl::string_view flag, const std::string& path,
                     absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", path, ": ", what));
}

}  // namespace

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

absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag,
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
  return std::unique_ptr<TokenAuthority>(
      new TokenAuthority(std::move(options), std::move(tokens)));
}

TokenAuthority::TokenAuthority(Options options, JobTokens job_tokens)
    : options_(std::move(options)),
      job_tokens_(std::move(job_tokens)),
      last_scan_(absl::Now()) {}

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
  if (options_.token_dir.empty() ||
      now - last_scan_ < options_.rescan_interval) {
    return;
  }
  last_scan_ = now;
  auto read = ReadDirectory(options_);
  if (!read.ok()) {
    // Said once per problem, not at every scan: the file stays broken
    // until someone fixes it.
    if (last_error_ != read.status().message()) {
      last_error_ = std::string(read.status().message());
      LOG(ERROR) << read.status().message()
                 << "; the job tokens read before stay in force until the "
                    "directory reads cleanly";
    }
    return;
  }
  job_tokens_ = *std::move(read);
  last_error_.clear();
}

bool TokenAuthority::IsKnown(absl::string_view token) const {
  bool known = ConstantTimeEquals(token, options_.shared_token) ||
               ConstantTimeEquals(token, options_.admin_token) ||
               ConstantTimeEquals(token, options_.peer_token);
  for (const auto& [job, job_token] : job_tokens_) {
    known = ConstantTimeEquals(token, job_token) || known;
  }
  return known && !token.empty();
}

absl::Status TokenAuthority::Check(std::optional<absl::string_view> token,
                                   absl::string_view job_id,
                                   CallClass call_class) {
  if (!token.has_value()) {
    return absl::UnauthenticatedError(
        "this pserver needs a token: start the client with its job's "
        "--auth_token_file");
  }
  const absl::string_view t = *token;
  const bool peer = !options_.peer_token.empty() &&
                    ConstantTimeEquals(t, options_.peer_token);
  const bool shared = !options_.shared_token.empty() &&
                      ConstantTimeEquals(t, options_.shared_token);
  if (call_class == CallClass::kPeer) {
    if (peer || (shared && options_.peer_token.empty())) {
      return absl::OkStatus();
    }
  } else if (shared) {
    return absl::OkStatus();
  }
  const bool admin = !options_.admin_token.empty() &&
                     ConstantTimeEquals(t, options_.admin_token);
  if (admin && call_class == CallClass::kStatus) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  MaybeRescan(absl::Now());
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
  if (call_class == CallClass::kPeer) {
    return absl::PermissionDeniedError(
        options_.peer_token.empty()
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
  if (!options_.peer_token.empty()) parts.push_back("a peer token");
  if (parts.empty()) return "no token";
  return absl::StrJoin(parts, ", ");
}

}  // namespace shardps
