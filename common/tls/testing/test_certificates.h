#ifndef SHARDPS_COMMON_TLS_TESTING_TEST_CERTIFICATES_H_
#define SHARDPS_COMMON_TLS_TESTING_TEST_CERTIFICATES_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <string>

#include "absl/time/time.h"
#include "glog/logging.h"

namespace shardps {
namespace testing {

// A self-signed certificate and its key, as PEM: what tests of the checks
// on certificates need without the openssl command.
struct TestCertificate {
  std::string cert_pem;
  std::string key_pem;
};

// Valid from now + `from` to now + `until` (negative: in the past), with an
// ECDSA P-256 key and the subject CN=`name`.
inline TestCertificate MakeTestCertificate(
    const std::string& name = "shardps-test",
    absl::Duration from = -absl::Hours(1),
    absl::Duration until = absl::Hours(24)) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  CHECK(key != nullptr);
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), absl::ToInt64Seconds(from));
  X509_gmtime_adj(X509_getm_notAfter(x), absl::ToInt64Seconds(until));
  X509_set_pubkey(x, key);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(
      subject, "CN", MBSTRING_ASC,
      reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, subject);
  CHECK(X509_sign(x, key, EVP_sha256()) > 0);
  auto pem = [](auto write) {
    BIO* b = BIO_new(BIO_s_mem());
    CHECK(write(b) == 1);
    char* data;
    const long n = BIO_get_mem_data(b, &data);  // NOLINT(runtime/int)
    std::string out(data, n);
    BIO_free(b);
    return out;
  };
  TestCertificate c;
  c.cert_pem = pem([x](BIO* b) { return PEM_write_bio_X509(b, x); });
  c.key_pem = pem([key](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr,
                                    nullptr);
  });
  X509_free(x);
  EVP_PKEY_free(key);
  return c;
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_COMMON_TLS_TESTING_TEST_CERTIFICATES_H_
