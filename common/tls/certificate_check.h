#ifndef SHARDPS_COMMON_TLS_CERTIFICATE_CHECK_H_
#define SHARDPS_COMMON_TLS_CERTIFICATE_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardps {

// A PEM file a process was given: the flag that named it, its path and its
// contents, for messages that say which file is wrong.
struct PemFile {
  std::string flag;  // "tls_cert_file"
  std::string path;
  std::string pem;
};

// What is wrong with a TLS certificate, its key or a CA, said before a
// process serves or dials with them (issue 34): gRPC takes an expired or
// not-yet-valid certificate without a word, and reports a key that does
// not match its certificate as "cannot listen". Checked with OpenSSL's
// parsers, the library gRPC itself uses.
//
// OK when `cert` holds a certificate valid at `now` (its first, the leaf;
// the rest of a chain is the peer's to check) and `key` is its private key.
// INVALID_ARGUMENT naming the file and the problem otherwise: no
// certificate or key in the file, not valid before or expired on a date,
// or a key of another certificate.
absl::Status CheckCertificateAndKey(const PemFile& cert, const PemFile& key,
                                    absl::Time now);

// OK when `ca` holds at least one certificate and each is valid at `now`;
// INVALID_ARGUMENT naming the file and the first that is not.
absl::Status CheckCaCertificates(const PemFile& ca, absl::Time now);

}  // namespace shardps

#endif  // SHARDPS_COMMON_TLS_CERTIFICATE_CHECK_H_
