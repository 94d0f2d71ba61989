#ifndef SHARDPS_COMMON_MONITORING_TLS_METRICS_SERVER_H_
#define SHARDPS_COMMON_MONITORING_TLS_METRICS_SERVER_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"

namespace shardps {

// GET /metrics over HTTPS (docs/monitoring.md, "Over TLS"), with OpenSSL:
// Debian's civetweb, under prometheus-cpp's Exposer, loads OpenSSL by the
// names of 1.1 and crashed on the first HTTPS connection under OpenSSL 3.
// One thread accepts, `threads` threads answer; a connection has
// `request_timeout` for its handshake and request, then is closed; the
// queue of accepted connections is bounded (a connection past it is closed
// at once). With a CA, a scraper must present a certificate signed by it.
// Thread-safe.
class TlsMetricsServer {
 public:
  struct Options {
    std::string host;
    int port = 0;  // 0: a free one
    std::string cert_pem, key_pem;
    std::string ca_pem;  // empty: no client certificate asked for
    int threads = 4;
    absl::Duration request_timeout = absl::Seconds(5);
  };
  // UNAVAILABLE naming the address when it cannot listen; INVALID_ARGUMENT
  // for a certificate or key OpenSSL does not take, or a key that is not
  // the certificate's.
  static absl::StatusOr<std::unique_ptr<TlsMetricsServer>> Start(
      const Options& options,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~TlsMetricsServer();

  TlsMetricsServer(const TlsMetricsServer&) = delete;
  TlsMetricsServer& operator=(const TlsMetricsServer&) = delete;

  int port() const { return port_; }

  // The text format of what the collectables hold now.
  std::string Scrape() const;

 private:
  struct Tls;
  TlsMetricsServer() = default;
  // Binds options_.host:port, and makes the wake pipe.
  absl::Status Listen();
  void AcceptLoop();
  void WorkLoop();
  // Answers one connection (closes it).
  void Serve(int fd) const;

  Options options_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<Tls> tls_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: written to stop the accept loop
  int port_ = 0;

  absl::Mutex mu_;
  std::deque<int> accepted_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_MONITORING_TLS_METRICS_SERVER_H_
