#include "common/transport/transport_security.h"

#include "common/testing/temp_dir.h"
#include "common/tls/testing/test_certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;

class TransportSecurityTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& data) {
    const std::string path = dir_.Path(name);
    EXPECT_TRUE(testing::WriteStringToFile(Env::Default(), path, data).ok());
    return path;
  }
  absl::Status Load(const TransportSecurityFiles& f,
                    TransportRole role = TransportRole::kServer) {
    return LoadTransportSecurity(f, role).status();
  }
  const std::string kPem = "-----BEGIN CERTIFICATE-----\nMII\n-----END";
  const testing::TestCertificate cert_ = testing::MakeTestCertificate();
  testing::ScopedTempDir dir_{"transport_security"};
};

TEST_F(TransportSecurityTest, NothingGivenIsPlaintextWithoutToken) {
  auto s = LoadTransportSecurity({}, TransportRole::kServer);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->auth_token.empty());
  EXPECT_FALSE(s->tls());
  EXPECT_EQ(DescribeTransportSecurity(*s), "no token, plaintext");
}

TEST_F(TransportSecurityTest, TokenDropsTheTrailingNewlineOnly) {
  TransportSecurityFiles f;
  f.auth_token_file = Write("token", "s3cr3t-0123\n");
  auto s = LoadTransportSecurity(f, TransportRole::kClient);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->auth_token, "s3cr3t-0123");
  EXPECT_EQ(DescribeTransportSecurity(*s), "token, plaintext");
}

TEST_F(TransportSecurityTest, BadTokenFilesNameTheFlagAndTheFile) {
  TransportSecurityFiles f;
  f.auth_token_file = dir_.Path("missing");
  absl::Status s = Load(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--auth_token_file="));
  EXPECT_THAT(s.message(), HasSubstr("cannot open"));

  f.auth_token_file = Write("empty", "\n\n");
  EXPECT_THAT(Load(f).message(), HasSubstr("the file is empty"));

  f.auth_token_file = Write("space", "two words\n");
  EXPECT_THAT(Load(f).message(), HasSubstr("printable ASCII"));

  f.auth_token_file = Write("binary", std::string("ab\0cd", 5));
  EXPECT_THAT(Load(f).message(), HasSubstr("found byte 0"));

  f.auth_token_file = Write("huge", std::string((1 << 20) + 1, 'a'));
  EXPECT_THAT(Load(f).message(), HasSubstr("is this the right file"));
}

TEST_F(TransportSecurityTest, CertificateFilesMustBePemAndComeInPairs) {
  TransportSecurityFiles f;
  f.tls_cert_file = Write("cert.pem", kPem);
  EXPECT_THAT(Load(f).message(), HasSubstr("go together"));
  f.tls_key_file = Write("key.txt", "not a key");
  absl::Status s = Load(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--tls_key_file="));
  EXPECT_THAT(s.message(), HasSubstr("not a PEM file"));
}

TEST_F(TransportSecurityTest, ServerTlsAloneAndMutual) {
  TransportSecurityFiles f;
  f.tls_cert_file = Write("cert.pem", cert_.cert_pem);
  f.tls_key_file = Write("key.pem", cert_.key_pem);
  auto s = LoadTransportSecurity(f, TransportRole::kServer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->tls());
  EXPECT_FALSE(s->mutual_tls());
  f.tls_ca_file = Write("ca.pem", cert_.cert_pem);
  s = LoadTransportSecurity(f, TransportRole::kServer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(DescribeTransportSecurity(*s), "no token, mutual TLS");
}

TEST_F(TransportSecurityTest, RoleSpecificCombinationsAreRefused) {
  TransportSecurityFiles ca_only;
  ca_only.tls_ca_file = Write("ca.pem", cert_.cert_pem);
  EXPECT_THAT(Load(ca_only, TransportRole::kServer).message(),
              HasSubstr("needs the pserver's own --tls_cert_file"));
  // A client with only the CA: TLS without a client certificate.
  auto s = LoadTransportSecurity(ca_only, TransportRole::kClient);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(DescribeTransportSecurity(*s), "no token, TLS");

  TransportSecurityFiles cert_only;
  cert_only.tls_cert_file = Write("cert.pem", cert_.cert_pem);
  cert_only.tls_key_file = Write("key.pem", cert_.key_pem);
  EXPECT_THAT(Load(cert_only, TransportRole::kClient).message(),
              HasSubstr("needs --tls_ca_file"));

  TransportSecurityFiles name;
  name.tls_server_name = "pserver-0";
  EXPECT_THAT(Load(name, TransportRole::kClient).message(),
              HasSubstr("needs TLS"));
  EXPECT_THAT(Load(name, TransportRole::kServer).message(),
              HasSubstr("is for clients"));
}

// Issue 34's audit: an expired certificate started silently, and a key of
// another certificate was reported as "cannot listen ... (is the port in
// use)". Both are refused when the files are loaded, naming them.
TEST_F(TransportSecurityTest, ExpiredCertificatesAndWrongKeysAreRefused) {
  const testing::TestCertificate old =
      testing::MakeTestCertificate("old", -absl::Hours(48), -absl::Hours(1));
  TransportSecurityFiles f;
  f.tls_cert_file = Write("old.pem", old.cert_pem);
  f.tls_key_file = Write("old.key", old.key_pem);
  absl::Status s = Load(f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("old.pem: the certificate /CN=old "
                                     "expired on"));
  f.tls_cert_file = Write("cert.pem", cert_.cert_pem);
  EXPECT_THAT(Load(f).message(),
              HasSubstr("old.key is not the private key of the certificate"));
  f.tls_key_file = Write("key.pem", cert_.key_pem);
  EXPECT_TRUE(Load(f).ok());
  f.tls_ca_file = Write("ca.pem", old.cert_pem);
  EXPECT_THAT(Load(f).message(), HasSubstr("--tls_ca_file="));
  // Not PEM certificates at all.
  f.tls_ca_file = Write("bad.pem", kPem);
  EXPECT_THAT(Load(f).message(), HasSubstr("no certificate could be read"));
}

}  // namespace
}  // namespace shardps
