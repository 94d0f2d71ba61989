// The transport-security flags, shared by every binary that talks to or
// serves the pservers (docs/security.md). Each also reads SHARDPS_<FLAG>.
#include "common/transport/transport_security.h"
#include "gflags/gflags.h"

DEFINE_string(auth_token_file, "",
              "file holding the shared secret: the pserver refuses calls "
              "without it (UNAUTHENTICATED); clients send it as "
              "'authorization: Bearer' metadata. Empty: no token");
DEFINE_string(auth_token_dir, "",
              "pserver: a folder of per-job tokens, file <job id>.token "
              "holding job <job id>'s: a client reaches only the job its "
              "token is for (PERMISSION_DENIED otherwise). Read again every "
              "2 s. Instead of --auth_token_file");
DEFINE_string(admin_token_file, "",
              "pserver: a token that reads every job's status (ps_status) "
              "and changes nothing");
DEFINE_string(peer_token_file, "",
              "pserver: the token of the calls between the pservers of a "
              "replicated job, which trainers' tokens cannot make; the same "
              "file on every pserver. Empty: --auth_token_file's token "
              "(none with --auth_token_dir)");
DEFINE_string(
    peer_identities_file, "",
    "pserver: a token per pserver instead of one peer token: lines "
    "'<address> <SHA-256 of its token>', the address as the "
    "trainers' --pservers gives it (scripts/cluster/make_peer_tokens.sh "
    "writes them). A call between pservers is let in by a listed "
    "token, and must come from the pserver it names as its sender. "
    "--peer_token_file is then this pserver's own token. Read "
    "again every 2 s");
DEFINE_string(tls_cert_file, "",
              "PEM certificate of this process (pserver: turns TLS on; "
              "client: offered for mutual TLS)");
DEFINE_string(tls_key_file, "", "PEM private key of --tls_cert_file");
DEFINE_string(tls_ca_file, "",
              "PEM CA certificates. pserver: client certificates must be "
              "signed by one (mutual TLS). Client: the pserver's must be "
              "(turns TLS on)");
DEFINE_string(tls_server_name, "",
              "client: the name the pserver's certificate must carry, when "
              "it is not the host in the address dialled");

namespace shardps {

FlagGroup SecurityFlagGroup() {
  return {"Security (docs/security.md)",
          {"auth_token_file", "auth_token_dir", "admin_token_file",
           "peer_token_file", "peer_identities_file", "tls_cert_file",
           "tls_key_file", "tls_ca_file", "tls_server_name"}};
}

TransportSecurityFiles TransportSecurityFilesFromFlags() {
  TransportSecurityFiles f;
  f.auth_token_file = FLAGS_auth_token_file;
  f.auth_token_dir = FLAGS_auth_token_dir;
  f.admin_token_file = FLAGS_admin_token_file;
  f.peer_token_file = FLAGS_peer_token_file;
  f.peer_identities_file = FLAGS_peer_identities_file;
  f.tls_cert_file = FLAGS_tls_cert_file;
  f.tls_key_file = FLAGS_tls_key_file;
  f.tls_ca_file = FLAGS_tls_ca_file;
  f.tls_server_name = FLAGS_tls_server_name;
  return f;
}

}  // namespace shardps
