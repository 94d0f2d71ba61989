// The checks on certificates at start (issue 34's audit: an expired or
// not-yet-valid certificate started silently, a mismatched key was
// reported as "cannot listen").
#include "common/tls/certificate_check.h"

#include "absl/time/clock.h"
#include "common/tls/testing/test_certificates.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;
using testing::MakeTestCertificate;
using testing::TestCertificate;

PemFile Cert(const TestCertificate& c) {
  return {"tls_cert_file", "/etc/ps/server.pem", c.cert_pem};
}
PemFile Key(const TestCertificate& c) {
  return {"tls_key_file", "/etc/ps/server.key", c.key_pem};
}

TEST(CertificateCheckTest, AValidCertificateAndItsKeyPass) {
  const TestCertificate c = MakeTestCertificate();
  EXPECT_TRUE(CheckCertificateAndKey(Cert(c), Key(c), absl::Now()).ok());
  EXPECT_TRUE(
      CheckCaCertificates({"tls_ca_file", "ca.pem", c.cert_pem}, absl::Now())
          .ok());
}

TEST(CertificateCheckTest, AnExpiredCertificateIsRefusedWithItsDate) {
  const TestCertificate c =
      MakeTestCertificate("old-server", -absl::Hours(48), -absl::Hours(24));
  absl::Status s = CheckCertificateAndKey(Cert(c), Key(c), absl::Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("--tls_cert_file=/etc/ps/server.pem: the certificate "
                        "/CN=old-server expired on "));
  EXPECT_THAT(s.message(), HasSubstr("renew it"));
}

TEST(CertificateCheckTest, ACertificateNotYetValidIsRefused) {
  const TestCertificate c =
      MakeTestCertificate("future", absl::Hours(24), absl::Hours(48));
  absl::Status s = CheckCertificateAndKey(Cert(c), Key(c), absl::Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("is not valid before"));
  EXPECT_THAT(s.message(), HasSubstr("is this machine's clock right?"));
  // The same file as a CA.
  s = CheckCaCertificates({"tls_ca_file", "ca.pem", c.cert_pem}, absl::Now());
  EXPECT_THAT(s.message(), HasSubstr("--tls_ca_file=ca.pem: the certificate "
                                     "/CN=future is not valid before"));
}

TEST(CertificateCheckTest, AKeyOfAnotherCertificateIsNamed) {
  const TestCertificate c = MakeTestCertificate("server");
  const TestCertificate other = MakeTestCertificate("other");
  absl::Status s = CheckCertificateAndKey(Cert(c), Key(other), absl::Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(),
            "--tls_key_file=/etc/ps/server.key is not the private key of the "
            "certificate /CN=server in --tls_cert_file=/etc/ps/server.pem");
}

TEST(CertificateCheckTest, FilesWithoutACertificateOrKeyAreNamed) {
  const TestCertificate c = MakeTestCertificate();
  const std::string garbage = "-----BEGIN CERTIFICATE-----\nMII\n-----END";
  absl::Status s = CheckCertificateAndKey({"tls_cert_file", "x.pem", garbage},
                                          Key(c), absl::Now());
  EXPECT_THAT(s.message(),
              HasSubstr("--tls_cert_file=x.pem: no certificate could be read"));
  // A certificate given as the key (the files swapped).
  s = CheckCertificateAndKey(Cert(c), {"tls_key_file", "k", c.cert_pem},
                             absl::Now());
  EXPECT_THAT(s.message(),
              HasSubstr("--tls_key_file=k: no private key could be read"));
  s = CheckCaCertificates({"tls_ca_file", "ca.pem", garbage}, absl::Now());
  EXPECT_EQ(s.message(),
            "--tls_ca_file=ca.pem: no certificate could be read from it");
}

TEST(CertificateCheckTest, EveryCertificateOfACaFileIsChecked) {
  const TestCertificate good = MakeTestCertificate("good");
  const TestCertificate old =
      MakeTestCertificate("old", -absl::Hours(48), -absl::Hours(24));
  absl::Status s = CheckCaCertificates(
      {"tls_ca_file", "ca.pem", good.cert_pem + old.cert_pem}, absl::Now());
  EXPECT_THAT(s.message(), HasSubstr("/CN=old expired on"));
}

}  // namespace
}  // namespace shardps
