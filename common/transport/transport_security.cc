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

// Secrets and certificates are small; a larger file is a mistake (or
// /dev/zero), not something to read to the end.
constexpr size_t kMaxSecretFileBytes = 1 << 20;

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

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  auto data = ReadSmallFile("auth_token_file", path);
  if (!data.ok()) return data.status();
  absl::string_view token = absl::StripTrailingAsciiWhitespace(*data);
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auth_token_file=", path,
                     ": the file is empty (it must hold the "
                     "secret, e.g. from `openssl rand -hex 32`)"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth_token_file=", path,
          ": the token may hold only printable ASCII without spaces (gRPC "
          "metadata carries nothing else); found byte ",
          static_cast<int>(static_cast<unsigned char>(c))));
    }
  }
  return std::string(token);
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
    auto token = ReadToken(files.auth_token_file);
    if (!token.ok()) return token.status();
    s.auth_token = *std::move(token);
  }
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
  return absl::StrCat(s.auth_token.empty() ? "no token" : "token", ", ",
                      s.mutual_tls() ? "mutual TLS"
                      : s.tls()      ? "TLS"
                                     : "plaintext");
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

}  // namespace shardps
