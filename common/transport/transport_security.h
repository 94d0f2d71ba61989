#ifndef SHARDPS_COMMON_TRANSPORT_TRANSPORT_SECURITY_H_
#define SHARDPS_COMMON_TRANSPORT_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/auth/token_authority.h"
#include "common/launch/flag_help.h"

namespace shardps {

// Where the secrets are: the --auth_token_file and --tls_* flags of the
// pserver, the trainer and the tools (SHARDPS_AUTH_TOKEN_FILE, ...).
struct TransportSecurityFiles {
  std::string auth_token_file;
  // Pserver only (common/auth/token_authority.h): a token per job, the
  // admin's, and the pservers' own for the calls between them.
  std::string auth_token_dir;
  std::string admin_token_file;
  std::string peer_token_file;
  std::string peer_identities_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // Client only: the name the pserver's certificate must carry, when it is
  // not the host of the address dialled.
  std::string tls_server_name;
};

// The flags' values (common/transport/transport_security_flags.cc defines the
// flags; a binary that calls this has them).
TransportSecurityFiles TransportSecurityFilesFromFlags();

// Those flags as a --help group (common/launch/flag_help.h).
FlagGroup SecurityFlagGroup();

// The secrets themselves, read once at start.
struct TransportSecurity {
  // Sent by clients as `authorization: Bearer <token>`; on the pserver, the
  // token of every job (--auth_token_file). Empty: none.
  std::string auth_token;
  // Pserver only: who may call it (null: anyone), and the token it
  // presents to the other pservers of a replicated job (peer_call_token()).
  std::shared_ptr<TokenAuthority> authority;
  std::string peer_token;

  const std::string& peer_call_token() const {
    return peer_token.empty() ? auth_token : peer_token;
  }
  // PEM. On the pserver: its certificate and key, and the CA that client
  // certificates must be signed by (mutual TLS; empty: server TLS only). On
  // a client: its certificate and key (empty: none offered) and the CA that
  // signed the pserver's certificate.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_ca_pem;
  std::string tls_server_name;

  bool tls() const { return !tls_cert_pem.empty() || !tls_ca_pem.empty(); }
  bool mutual_tls() const {
    return !tls_cert_pem.empty() && !tls_ca_pem.empty();
  }
};

enum class TransportRole { kServer, kClient };

// Reads and checks the files. INVALID_ARGUMENT, naming the flag and the
// file, for a pserver-only flag given to a client, what
// TokenAuthority::Create refuses, an unreadable or empty file, a token that
// gRPC metadata cannot carry (only printable ASCII without spaces; a trailing
// newline is dropped), a file that is not PEM, a certificate without its key or
// the other way round, a server CA without a server certificate, a client
// certificate without the CA that signed the pserver's, and a server name
// without TLS.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(
    const TransportSecurityFiles& files, TransportRole role);

// One line for the log: "token, mutual TLS", "no token, plaintext", ...
std::string DescribeTransportSecurity(const TransportSecurity& security);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TRANSPORT_TRANSPORT_SECURITY_H_
