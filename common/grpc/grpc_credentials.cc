#include "common/grpc/grpc_credentials.h"

#include <grpc/grpc_security.h>

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/job_id.h"
#include "common/auth/token_authority.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::string_view SliceView(const grpc_slice& s) {
  return absl::string_view(
      reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)),
      GRPC_SLICE_LENGTH(s));
}

// What call `path` ("/shardps.ParameterServer/Push") is, for who may make
// it.
CallClass ClassOf(absl::string_view path) {
  if (absl::StartsWith(path, "/shardps.Replication/")) return CallClass::kPeer;
  if (path == "/shardps.ParameterServer/GetStatus") return CallClass::kStatus;
  return CallClass::kJob;
}

// gRPC's auth metadata processor (grpc_security.h), run by the server's
// auth filter on each call's metadata before the call reaches a method.
// `state` is a std::shared_ptr<TokenAuthority>*.
void CheckToken(void* state, grpc_auth_context* context,
                const grpc_metadata* md, size_t num_md,
                grpc_process_auth_metadata_done_cb done, void* user_data) {
  TokenAuthority& authority =
      **static_cast<std::shared_ptr<TokenAuthority>*>(state);
  const grpc_metadata* auth = nullptr;
  absl::string_view path;
  absl::string_view job = kDefaultJobId;
  int jobs_named = 0;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view key = SliceView(md[i].key);
    if (key == kAuthorizationMetadataKey) {
      auth = &md[i];
    } else if (key == ":path") {
      path = SliceView(md[i].value);
    } else if (key == kJobMetadataKey) {
      job = SliceView(md[i].value);
      ++jobs_named;
    }
  }
  if (absl::StartsWith(path, kHealthServicePrefix)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  absl::Status s;
  std::string peer;  // the calling pserver, with --peer_identities_file
  if (jobs_named > 1) {
    // The method would see one of them, the check another.
    s = absl::PermissionDeniedError("a call names one job (shardps-job) once");
  } else {
    std::optional<absl::string_view> token;
    if (auth != nullptr) {
      absl::string_view presented = SliceView(auth->value);
      if (absl::ConsumePrefix(&presented, "Bearer "))
        token = presented;
      else
        token = absl::string_view();  // a malformed header: no known token
    }
    s = authority.Check(token, job, ClassOf(path), &peer);
  }
  if (!s.ok()) {
    // gRPC copies the message before done() returns.
    const std::string message(s.message());
    done(user_data, nullptr, 0, nullptr, 0,
         static_cast<grpc_status_code>(s.code()), message.c_str());
    return;
  }
  if (!peer.empty() && context != nullptr) {
    grpc_auth_context_add_cstring_property(context, kPeerIdentityProperty,
                                           peer.c_str());
  }
  // Consumed: the methods never see the secret.
  done(user_data, auth, 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
}

void DeleteAuthority(void* state) {
  delete static_cast<std::shared_ptr<TokenAuthority>*>(state);
}

// Server credentials made with gRPC's C API, for what the C++ API of gRPC
// 1.51 cannot express: an auth metadata processor on plaintext credentials
// (InsecureServerCredentials() aborts on SetAuthMetadataProcessor). The
// processor is set on the core credentials; ServerBuilder adds the port
// through AddPortToServer, as it does for its own credentials classes.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CoreServerCredentials(grpc_server_credentials* creds)
      : creds_(creds) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(creds_); }

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    LOG(FATAL) << "CoreServerCredentials takes its processor from the C API";
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* const creds_;
};

grpc_server_credentials* CoreSslServerCredentials(const TransportSecurity& s) {
  grpc_ssl_pem_key_cert_pair pair = {s.tls_key_pem.c_str(),
                                     s.tls_cert_pem.c_str()};
  grpc_ssl_server_certificate_config* config =
      grpc_ssl_server_certificate_config_create(
          s.mutual_tls() ? s.tls_ca_pem.c_str() : nullptr, &pair, 1);
  grpc_ssl_server_credentials_options* options =
      grpc_ssl_server_credentials_create_options_using_config(
          s.mutual_tls()
              ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          config);
  // Takes ownership of the options and their config.
  return grpc_ssl_server_credentials_create_with_options(options);
}

}  // namespace

std::string BearerMetadataValue(const std::string& token) {
  return absl::StrCat("Bearer ", token);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(
    const TransportSecurity& s) {
  std::shared_ptr<TokenAuthority> authority = s.authority;
  if (authority == nullptr && !s.auth_token.empty()) {
    TokenAuthority::Options o;
    o.shared_token = s.auth_token;
    authority = *TokenAuthority::Create(std::move(o));
  }
  if (authority == nullptr) {
    if (!s.tls()) return grpc::InsecureServerCredentials();
    grpc::SslServerCredentialsOptions options(
        s.mutual_tls()
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    options.pem_key_cert_pairs.push_back({s.tls_key_pem, s.tls_cert_pem});
    if (s.mutual_tls()) options.pem_root_certs = s.tls_ca_pem;
    return grpc::SslServerCredentials(options);
  }
  grpc_server_credentials* creds =
      s.tls() ? CoreSslServerCredentials(s)
              : grpc_insecure_server_credentials_create();
  grpc_server_credentials_set_auth_metadata_processor(
      creds, grpc_auth_metadata_processor{
                 CheckToken, DeleteAuthority,
                 new std::shared_ptr<TokenAuthority>(std::move(authority))});
  return std::make_shared<CoreServerCredentials>(creds);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(
    const TransportSecurity& s) {
  if (!s.tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = s.tls_ca_pem;
  options.pem_private_key = s.tls_key_pem;
  options.pem_cert_chain = s.tls_cert_pem;
  return grpc::SslCredentials(options);
}

void AddChannelSecurityArgs(const TransportSecurity& s,
                            grpc::ChannelArguments* args) {
  if (!s.tls_server_name.empty()) {
    args->SetSslTargetNameOverride(s.tls_server_name);
  }
}

}  // namespace shardps
