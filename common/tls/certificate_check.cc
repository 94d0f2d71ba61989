#include "common/tls/certificate_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <ctime>
#include <memory>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio Open(const PemFile& f) {
  return Bio(BIO_new_mem_buf(f.pem.data(), static_cast<int>(f.pem.size())));
}

std::string Where(const PemFile& f) {
  return absl::StrCat("--", f.flag, "=", f.path);
}

// OpenSSL's reason for the last failure (its queue emptied), for messages.
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();  // NOLINT(runtime/int): its type
  ERR_clear_error();
  if (e == 0) return "no reason given";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

std::string Subject(X509* x) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(x), buf, sizeof(buf));
  return buf;
}

absl::Time ToTime(const ASN1_TIME* t) {
  struct tm tm = {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

std::string Date(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone());
}

// The problem with the validity of `x` at `now`, or OK.
absl::Status CheckValidity(const PemFile& f, X509* x, absl::Time now) {
  const absl::Time from = ToTime(X509_get0_notBefore(x));
  const absl::Time until = ToTime(X509_get0_notAfter(x));
  if (now < from) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(f), ": the certificate ", Subject(x), " is not valid before ",
        Date(from), " (now ", Date(now), "); is this machine's clock right?"));
  }
  if (now > until) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(f), ": the certificate ", Subject(x), " expired on ", Date(until),
        " (now ", Date(now),
        "); renew it (scripts/cluster/make_certs.sh for test clusters)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCertificateAndKey(const PemFile& cert, const PemFile& key,
                                    absl::Time now) {
  ERR_clear_error();
  Bio cb = Open(cert);
  Cert x(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  if (x == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(cert), ": no certificate could be read from it (",
                     OpenSslError(), ")"));
  }
  if (absl::Status s = CheckValidity(cert, x.get(), now); !s.ok()) return s;
  Bio kb = Open(key);
  Key k(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (k == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), ": no private key could be read from it (",
                     OpenSslError(), "; an encrypted key is not supported)"));
  }
  if (X509_check_private_key(x.get(), k.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(Where(key), " is not the private key of the certificate ",
                     Subject(x.get()), " in ", Where(cert)));
  }
  return absl::OkStatus();
}

absl::Status CheckCaCertificates(const PemFile& ca, absl::Time now) {
  ERR_clear_error();
  Bio b = Open(ca);
  int read = 0;
  while (true) {
    Cert x(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
    if (x == nullptr) break;
    ++read;
    if (absl::Status s = CheckValidity(ca, x.get(), now); !s.ok()) return s;
  }
  ERR_clear_error();  // the end of the file reads as an error
  if (read == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(ca), ": no certificate could be read from it"));
  }
  return absl::OkStatus();
}

}  // namespace shardps
