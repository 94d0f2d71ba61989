#include "common/transport/transport_security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "common/tls/certificate_check.h"

namespace shardps {
namespace {

absl::StatusOr<std::string> ReadSmallFile(const char* flag,
                                          const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot open the file"));
  }
  std::string data(kMaxSecretFileBytes + 1, '\0');
  f.read(data.data(), data.size());
  if (f.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": cannot read the file"));
  }
  data.resize(f.gcount());
  if (data.size() > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", path, ": larger than ",
                     kMaxSecretFileBytes, " bytes; is this the right file?"));
  }
  return data;
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  if (path.empty()) return std::string();
  auto data = ReadSmallFile(flag, path);
  if (!data.ok()) return data.status();
  if (!absl::StrContains(*data, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", path, ": not a PEM file (no \"-----BEGIN\" line)"));
  }
  return *std::move(data);
}

// The pserver's TokenAuthority, when it has any token.
absl::Status LoadTokenAuthority(const TransportSecurityFiles& files,
                                TransportRole role, TransportSecurity* s) {
  const bool any =
      !files.auth_token_dir.empty() || !files.admin_token_file.empty() ||
      !files.peer_token_file.empty() || !files.peer_identities_file.empty();
  if (role == TransportRole::kClient) {
    if (!any) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "--auth_token_dir, --admin_token_file, --peer_token_file and "
        "--peer_identities_file are the pserver's; a client presents its "
        "job's token with --auth_token_file");
  }
  if (!any && s->auth_token.empty()) return absl::OkStatus();
  TokenAuthority::Options o;
  o.shared_token = s->auth_token;
  o.token_dir = files.auth_token_dir;
  o.peer_identities_file = files.peer_identities_file;
  if (!files.admin_token_file.empty()) {
    auto admin = ReadTokenFile("admin_token_file", files.admin_token_file);
    if (!admin.ok()) return admin.status();
    o.admin_token = *std::move(admin);
  }
  if (!files.peer_token_file.empty()) {
    auto peer = ReadTokenFile("peer_token_file", files.peer_token_file);
    if (!peer.ok()) return peer.status();
    o.peer_token = *std::move(peer);
  }
  if (o.shared_token.empty() && o.token_dir.empty()) {
    return absl::InvalidArgumentError(
        "--admin_token_file and --peer_token_file go with the jobs' tokens "
        "(--auth_token_file or --auth_token_dir): without them any client "
        "could call");
  }
  s->peer_token = o.peer_token;
  auto authority = TokenAuthority::Create(std::move(o));
  if (!authority.ok()) return authority.status();
  s->authority = *std::move(authority);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransportSecurity> LoadTransportSecurity(
    const TransportSecurityFiles& files, TransportRole role) {
  const bool server = role == TransportRole::kServer;
  if (files.tls_cert_file.empty() != files.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both or "
        "neither");
  }
  if (server && !files.tls_ca_file.empty() && files.tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_ca_file on the pserver asks for mutual TLS, which needs the "
        "pserver's own --tls_cert_file and --tls_key_file");
  }
  if (!server && !files.tls_cert_file.empty() && files.tls_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file on a client needs --tls_ca_file, the CA that signed "
        "the pserver's certificate");
  }
  if (server && !files.tls_server_name.empty()) {
    return absl::InvalidArgumentError(
        "--tls_server_name is for clients (the name in the pserver's "
        "certificate)");
  }
  TransportSecurity s;
  if (!files.auth_token_file.empty()) {
    auto token = ReadTokenFile("auth_token_file", files.auth_token_file);
    if (!token.ok()) return token.status();
    s.auth_token = *std::move(token);
  }
  RETURN_IF_ERROR(LoadTokenAuthority(files, role, &s));
  auto cert = ReadPem("tls_cert_file", files.tls_cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadPem("tls_key_file", files.tls_key_file);
  if (!key.ok()) return key.status();
  auto ca = ReadPem("tls_ca_file", files.tls_ca_file);
  if (!ca.ok()) return ca.status();
  // What gRPC would take without a word (an expired certificate) or report
  // as something else (a key of another certificate: "cannot listen").
  const absl::Time now = absl::Now();
  if (!cert->empty()) {
    RETURN_IF_ERROR(CheckCertificateAndKey(
        {"tls_cert_file", files.tls_cert_file, *cert},
        {"tls_key_file", files.tls_key_file, *key}, now));
  }
  if (!ca->empty()) {
    RETURN_IF_ERROR(
        CheckCaCertificates({"tls_ca_file", files.tls_ca_file, *ca}, now));
  }
  s.tls_cert_pem = *std::move(cert);
  s.tls_key_pem = *std::move(key);
  s.tls_ca_pem = *std::move(ca);
  if (!files.tls_server_name.empty() && !s.tls()) {
    return absl::InvalidArgumentError(
        "--tls_server_name needs TLS (--tls_ca_file)");
  }
  s.tls_server_name = files.tls_server_name;
  return s;
}

std::string DescribeTransportSecurity(const TransportSecurity& s) {
  const std::string tokens = s.authority != nullptr ? s.authority->Describe()
                             : s.auth_token.empty() ? "no token"
                                                    : "token";
  return absl::StrCat(tokens, ", ",
                      s.mutual_tls() ? "mutual TLS"
                      : s.tls()      ? "TLS"
                                     : "plaintext");
}

}  // namespace shardps
