// The pserver's front door over real sockets: the token (UNAUTHENTICATED
// before the request is read, the health service open), server TLS and
// mutual TLS (plaintext and foreign-CA clients get no answer). Certificates
// are made at test time by scripts/cluster/make_certs.sh.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/job_id.h"
#include "common/grpc/grpc_credentials.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "proto/ps_service.pb.h"
#include "pserver/server/grpc_server.h"
#include "trainer/transport/grpc_ps_client.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

// A CA with a pserver and a client certificate, in `dir`.
void MakeCertificates(const std::string& dir) {
  const std::string cmd =
      absl::StrCat("bash ", PS_SOURCE_DIR, "/scripts/cluster/make_certs.sh ",
                   dir, " 127.0.0.1,localhost >/dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// A unary call of `method` with `request` bytes, as any client could send.
grpc::Status RawCall(std::shared_ptr<grpc::Channel> channel,
                     const std::string& method, const std::string& request,
                     std::string* response, const std::string& token = "",
                     const std::vector<std::string>& jobs = {}) {
  grpc::GenericStub stub(std::move(channel));
  grpc::ClientContext ctx;
  if (!token.empty()) {
    ctx.AddMetadata(kAuthorizationMetadataKey, BearerMetadataValue(token));
  }
  for (const std::string& job : jobs) ctx.AddMetadata(kJobMetadataKey, job);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1), resp;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  std::vector<grpc::Slice> slices;
  if (status.ok() && resp.Dump(&slices).ok()) {
    for (const auto& s : slices) {
      response->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

std::string Read(const std::string& path) {
  return testing::ReadFileOrFail(Env::Default(), path);
}

class GrpcSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::ScopedTempDir("grpc_security");
    MakeCertificates(dir_->Path("ours"));
    MakeCertificates(dir_->Path("foreign"));
  }
  static void TearDownTestSuite() { delete dir_; }

  // PEM files of the CA `which` ("ours" or "foreign").
  static std::string Pem(const std::string& which, const std::string& file) {
    return Read(dir_->Path(absl::StrCat(which, "/", file)));
  }

  void Serve(TransportSecurity security) {
    GrpcServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.security = std::move(security);
    server_ = std::move(*GrpcPsServer::Create(o));
    ASSERT_TRUE(server_->Start().ok());
  }

  // GetStatus through a client with `security`, giving up after 2 s of
  // UNAVAILABLE (a refused handshake looks like an unreachable pserver).
  absl::Status Call(const TransportSecurity& security) {
    RpcOptions rpc;
    rpc.attempt_deadline = absl::Seconds(2);
    rpc.retry_budget = absl::Seconds(2);
    auto client = GrpcPsClient::Create(
        absl::StrCat("127.0.0.1:", server_->port()), rpc, &timer_, security);
    GetStatusResponse resp;
    return client->GetStatus(GetStatusRequest(), &resp);
  }

  // The health service, with `security`'s channel but no token.
  grpc::StatusCode Health(const TransportSecurity& security) {
    std::string resp;
    grpc::Status s =
        RawCall(Channel(security), "/grpc.health.v1.Health/Check", "", &resp);
    if (s.ok()) {
      EXPECT_EQ(resp, std::string("\x08\x01", 2));  // SERVING
    }
    return s.error_code();
  }

  std::shared_ptr<grpc::Channel> Channel(const TransportSecurity& security) {
    grpc::ChannelArguments args;
    AddChannelSecurityArgs(security, &args);
    return grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()),
        ChannelCredentialsFor(security), args);
  }

  static TransportSecurity Token(const std::string& token) {
    TransportSecurity s;
    s.auth_token = token;
    return s;
  }
  static TransportSecurity ServerTls(bool mutual) {
    TransportSecurity s;
    s.tls_cert_pem = Pem("ours", "server.pem");
    s.tls_key_pem = Pem("ours", "server.key");
    if (mutual) s.tls_ca_pem = Pem("ours", "ca.pem");
    return s;
  }
  // A client trusting `server_ca`'s CA, offering `client_ca`'s client
  // certificate (none when empty).
  static TransportSecurity ClientTls(const std::string& server_ca,
                                     const std::string& client_ca) {
    TransportSecurity s;
    s.tls_ca_pem = Pem(server_ca, "ca.pem");
    if (!client_ca.empty()) {
      s.tls_cert_pem = Pem(client_ca, "client.pem");
      s.tls_key_pem = Pem(client_ca, "client.key");
    }
    return s;
  }

  static testing::ScopedTempDir* dir_;
  RetryTimer timer_;
  std::unique_ptr<GrpcPsServer> server_;
};

testing::ScopedTempDir* GrpcSecurityTest::dir_ = nullptr;

TEST_F(GrpcSecurityTest, TokenIsRequiredOnEveryMethodButHealth) {
  Serve(Token("0123456789abcdef"));
  EXPECT_TRUE(Call(Token("0123456789abcdef")).ok());

  absl::Status none = Call(TransportSecurity());
  EXPECT_EQ(none.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(none.message(), HasSubstr("this pserver needs a token"));

  absl::Status wrong = Call(Token("0123456789abcdeF"));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(wrong.message(), HasSubstr("wrong token"));
  EXPECT_EQ(Call(Token("0123456789abcdef0")).code(),
            absl::StatusCode::kUnauthenticated);

  EXPECT_EQ(Health(TransportSecurity()), grpc::StatusCode::OK);
}

TEST_F(GrpcSecurityTest, TokenRefusedBeforeTheRequestIsRead) {
  Serve(Token("secret-token"));
  // Bytes that are no ParameterServer request at all: a method that read
  // them would answer INTERNAL or INVALID_ARGUMENT.
  std::string resp;
  EXPECT_EQ(
      RawCall(Channel(TransportSecurity()), "/shardps.ParameterServer/Push",
              std::string(64, '\xff'), &resp)
          .error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  // The same bytes with the token reach the method, which cannot parse
  // them.
  grpc::Status with_token =
      RawCall(Channel(TransportSecurity()), "/shardps.ParameterServer/Push",
              std::string(64, '\xff'), &resp, "secret-token");
  EXPECT_NE(with_token.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(with_token.error_code(), grpc::StatusCode::OK);
}

TEST_F(GrpcSecurityTest, ServerTlsServesAnyTlsClientOnly) {
  Serve(ServerTls(/*mutual=*/false));
  EXPECT_TRUE(Call(ClientTls("ours", "")).ok());
  EXPECT_TRUE(Call(ClientTls("ours", "ours")).ok());
  // A client that does not trust the pserver's CA, and a plaintext one.
  EXPECT_EQ(Call(ClientTls("foreign", "")).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call(TransportSecurity()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Health(ClientTls("ours", "")), grpc::StatusCode::OK);
}

TEST_F(GrpcSecurityTest, MutualTlsAnswersOnlyCertificatesOfItsCa) {
  Serve(ServerTls(/*mutual=*/true));
  EXPECT_TRUE(Call(ClientTls("ours", "ours")).ok());
  EXPECT_EQ(Call(ClientTls("ours", "")).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call(ClientTls("ours", "foreign")).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(Call(TransportSecurity()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Health(TransportSecurity()), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcSecurityTest, MutualTlsAndToken) {
  TransportSecurity server = ServerTls(/*mutual=*/true);
  server.auth_token = "tok";
  Serve(server);
  TransportSecurity client = ClientTls("ours", "ours");
  EXPECT_EQ(Call(client).code(), absl::StatusCode::kUnauthenticated);
  client.auth_token = "tok";
  EXPECT_TRUE(Call(client).ok());
  EXPECT_EQ(Health(ClientTls("ours", "ours")), grpc::StatusCode::OK);
}

// Per-job tokens (common/auth/token_authority.h) at the front door: a job's
// token reaches its job only, the same answer for a job that exists and one
// that does not, and only the peer token reaches the calls between
// pservers.
TEST_F(GrpcSecurityTest, PerJobTokensReachTheirJobOnly) {
  testing::ScopedTempDir tokens("grpc_security_tokens");
  for (const char* job : {"a", "b"}) {
    ASSERT_TRUE(testing::WriteStringToFile(
                    Env::Default(), tokens.Path(absl::StrCat(job, ".token")),
                    absl::StrCat("token-", job))
                    .ok());
  }
  TokenAuthority::Options o;
  o.token_dir = tokens.path();
  o.admin_token = "admin";
  o.peer_token = "peer";
  TransportSecurity server;
  server.authority = *TokenAuthority::Create(o);
  Serve(server);
  auto call = [&](const std::string& method, const std::string& token,
                  std::vector<std::string> jobs) {
    std::string resp;
    return RawCall(Channel(TransportSecurity()), method, "", &resp, token,
                   jobs);
  };
  const std::string status = "/shardps.ParameterServer/GetStatus";
  const std::string push = "/shardps.ParameterServer/Push";
  EXPECT_TRUE(call(status, "token-a", {"a"}).ok());
  EXPECT_TRUE(call(status, "admin", {"b"}).ok());
  for (const char* job : {"b", "no-such-job"}) {
    grpc::Status s = call(push, "token-a", {job});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << job;
    EXPECT_EQ(s.error_message(),
              absl::StrCat("this token does not cover job '", job, "'"));
  }
  // No job named: the default job, which no token here covers.
  EXPECT_EQ(call(status, "token-a", {}).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Two jobs named: the check and the method could see different ones.
  EXPECT_EQ(call(status, "token-a", {"a", "b"}).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(call(push, "admin", {"a"}).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  for (const char* method : {"Forward", "ViewCommit", "InstallUnit"}) {
    const std::string path = absl::StrCat("/shardps.Replication/", method);
    grpc::Status s = call(path, "token-a", {"a"});
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
    EXPECT_THAT(s.error_message(), HasSubstr("--peer_token_file"));
    // The peer token reaches the method (which finds no replicated job a).
    grpc::Status peer = call(path, "peer", {"a"});
    EXPECT_NE(peer.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_NE(peer.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(Health(TransportSecurity()), grpc::StatusCode::OK);
}

TEST_F(GrpcSecurityTest, ServerNameOverrideMatchesTheCertificate) {
  Serve(ServerTls(/*mutual=*/false));
  TransportSecurity client = ClientTls("ours", "");
  client.tls_server_name = "localhost";
  EXPECT_TRUE(Call(client).ok());
  client.tls_server_name = "pserver-7.example";
  EXPECT_EQ(Call(client).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardps
