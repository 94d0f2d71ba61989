#include "common/monitoring/tls_metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "glog/logging.h"
#include "prometheus/text_serializer.h"

namespace shardps {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr size_t kMaxQueued = 64;

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Sets the socket's send and receive timeouts to what is left until
// `deadline` (at least 1 ms); false when nothing is left.
bool TimeLeft(int fd, absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return false;
  const timeval tv = absl::ToTimeval(std::max(left, absl::Milliseconds(1)));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return true;
}

}  // namespace

struct TlsMetricsServer::Tls {
  ~Tls() { SSL_CTX_free(ctx); }
  // The context of `options`' certificate, key and CA.
  absl::Status Load(const Options& options);
  SSL_CTX* ctx = nullptr;
};

absl::Status TlsMetricsServer::Tls::Load(const Options& options) {
  ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return absl::InternalError(OpenSslError());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("/metrics over TLS: ", what, " (", OpenSslError(), ")"));
  };
  BioPtr certs = MemoryBio(options.cert_pem);
  X509* leaf = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf) != 1) {
    X509_free(leaf);
    return bad("the certificate does not read");
  }
  X509_free(leaf);
  while (X509* chain =
             PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
    SSL_CTX_add_extra_chain_cert(ctx, chain);  // takes it
  }
  ERR_clear_error();  // the end of the chain
  BioPtr key_bio = MemoryBio(options.key_pem);
  EVP_PKEY* key =
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) return bad("the key does not read");
  const bool used = SSL_CTX_use_PrivateKey(ctx, key) == 1;
  EVP_PKEY_free(key);
  if (!used || SSL_CTX_check_private_key(ctx) != 1) {
    return bad("the key is not the certificate's");
  }
  if (options.ca_pem.empty()) return absl::OkStatus();
  BioPtr ca = MemoryBio(options.ca_pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int added = 0;
  while (X509* c = PEM_read_bio_X509(ca.get(), nullptr, nullptr, nullptr)) {
    added += X509_STORE_add_cert(store, c);
    X509_free(c);
  }
  ERR_clear_error();
  if (added == 0) return bad("the CA file holds no certificate");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  return absl::OkStatus();
}

absl::Status TlsMetricsServer::Listen() {
  const std::string addr = absl::StrCat(options_.host, ":", options_.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  std::string host = options_.host;
  if (host.size() > 2 && host.front() == '[') {
    host = host.substr(1, host.size() - 2);
  }
  if (getaddrinfo(host.c_str(), absl::StrCat(options_.port).c_str(), &hints,
                  &ai) != 0 ||
      ai == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--monitoring_port: cannot resolve ", addr));
  }
  const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
                     listen(fd, 64) == 0;
  const int err = errno;
  freeaddrinfo(ai);
  if (!bound) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("--monitoring_port: cannot listen on ", addr, " (",
                     std::strerror(err), "; is the port in use?)"));
  }
  listen_fd_ = fd;
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  port_ = ntohs(local.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  if (pipe2(wake_, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TlsMetricsServer>> TlsMetricsServer::Start(
    const Options& options,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  std::unique_ptr<TlsMetricsServer> s(new TlsMetricsServer);
  s->options_ = options;
  s->collectables_ = std::move(collectables);
  s->tls_ = std::make_unique<Tls>();
  RETURN_IF_ERROR(s->tls_->Load(options));
  // A scraper that goes away mid-answer must not end the process.
  std::signal(SIGPIPE, SIG_IGN);
  RETURN_IF_ERROR(s->Listen());
  TlsMetricsServer* raw = s.get();
  s->threads_.emplace_back([raw] { raw->AcceptLoop(); });
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    s->threads_.emplace_back([raw] { raw->WorkLoop(); });
  }
  return s;
}

TlsMetricsServer::~TlsMetricsServer() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (wake_[1] >= 0) {
    const char c = 0;
    (void)!write(wake_[1], &c, 1);
  }
  for (std::thread& t : threads_) t.join();
  for (int fd : accepted_) close(fd);
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void TlsMetricsServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) break;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or the like: not a reason to spin.
      if (errno == EMFILE || errno == ENFILE)
        absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    absl::MutexLock l(&mu_);
    if (accepted_.size() >= kMaxQueued) {
      close(fd);  // every worker busy and the queue full
      continue;
    }
    accepted_.push_back(fd);
  }
}

void TlsMetricsServer::WorkLoop() {
  while (true) {
    int fd;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || !accepted_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      fd = accepted_.front();
      accepted_.pop_front();
    }
    Serve(fd);
  }
}

std::string TlsMetricsServer::Scrape() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : collectables_) {
    std::vector<prometheus::MetricFamily> f = c->Collect();
    families.insert(families.end(), std::make_move_iterator(f.begin()),
                    std::make_move_iterator(f.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

void TlsMetricsServer::Serve(int fd) const {
  const absl::Time deadline = absl::Now() + options_.request_timeout;
  SSL* ssl = SSL_new(tls_->ctx);
  std::string request;
  bool whole = false;
  if (ssl != nullptr && SSL_set_fd(ssl, fd) == 1 && TimeLeft(fd, deadline) &&
      SSL_accept(ssl) == 1) {
    char buf[1024];
    while (request.size() < kMaxRequestBytes && TimeLeft(fd, deadline)) {
      const int n = SSL_read(ssl, buf, sizeof(buf));
      if (n <= 0) break;
      request.append(buf, n);
      if (absl::StrContains(request, "\r\n\r\n")) {
        whole = true;
        break;
      }
    }
  }
  ERR_clear_error();
  if (whole) {
    const std::string first = request.substr(0, request.find("\r\n"));
    const std::vector<absl::string_view> line = absl::StrSplit(first, ' ');
    const absl::string_view path =
        line.size() >= 2 ? line[1].substr(0, line[1].find('?')) : "";
    std::string status = "200 OK", body;
    if (line.size() < 3 || line[0] != "GET") {
      status = "405 Method Not Allowed";
      body = "GET /metrics only\n";
    } else if (path != "/metrics") {
      status = "404 Not Found";
      body = "not found: the metrics are at /metrics\n";
    } else {
      body = Scrape();
    }
    const std::string answer = absl::StrCat(
        "HTTP/1.1 ", status,
        "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        "Content-Length: ",
        body.size(), "\r\nConnection: close\r\n\r\n", body);
    size_t sent = 0;
    while (sent < answer.size() && TimeLeft(fd, deadline)) {
      const int n = SSL_write(ssl, answer.data() + sent,
                              static_cast<int>(answer.size() - sent));
      if (n <= 0) break;
      sent += n;
    }
    if (sent == answer.size()) SSL_shutdown(ssl);
    ERR_clear_error();
  }
  SSL_free(ssl);
  close(fd);
}

}  // namespace shardps
