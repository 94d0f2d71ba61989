#ifndef SHARDPS_COMMON_MONITORING_MONITORING_H_
#define SHARDPS_COMMON_MONITORING_MONITORING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/launch/flag_help.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace shardps {

class TlsMetricsServer;

// Where a binary serves its Prometheus metrics (docs/monitoring.md).
struct MonitoringOptions {
  // Address to listen on. Default: all interfaces.
  std::string host = "0.0.0.0";
  // TCP port of the HTTP server for /metrics; 0 binds a free one, -1 serves
  // none. Default: -1.
  int port = -1;
  // Written with the bound port once it serves. Default: none.
  std::string port_file;
  // Threads answering scrapes, and how long one waits for a request to
  // arrive whole: a client that sends half a request and stops holds one
  // thread that long, not the server. Default: 4 and 5 s.
  int threads = 4;
  absl::Duration request_timeout = absl::Seconds(5);
  // --monitoring_tls: serve over HTTPS (TlsMetricsServer) with the
  // process's certificate and key (PEM, set by UseTls); with a CA,
  // scrapers must present a certificate signed by it.
  bool tls = false;
  std::string tls_cert_pem, tls_key_pem, tls_ca_pem;

  // With `tls`: takes the process's TLS files (its --tls_cert_file,
  // --tls_key_file and --tls_ca_file, read); INVALID_ARGUMENT when it has
  // no certificate. Without: nothing.
  absl::Status UseTls(std::string cert_pem, std::string key_pem,
                      std::string ca_pem);
};

// The monitoring options from --monitoring_port, --monitoring_port_file and
// --monitoring_host (common/monitoring/monitoring_flags.cc), the host
// `default_host` when --monitoring_host is empty (the pserver's --host).
// INVALID_ARGUMENT for a port outside [-1, 65535] or a port file without a
// port.
absl::StatusOr<MonitoringOptions> MonitoringOptionsFromFlags(
    const std::string& default_host);

// Those flags as a --help group (common/launch/flag_help.h).
FlagGroup MonitoringFlagGroup();

// An HTTP server answering GET /metrics in the Prometheus text format
// (prometheus-cpp's Exposer, on civetweb; over TLS, TlsMetricsServer) with
// what its collectables hold at the time of the scrape. Thread-safe.
class MonitoringServer {
 public:
  // Binds options.port (which must be >= 0), serves `collectables` (kept
  // alive by the server), and writes the port file. UNAVAILABLE naming the
  // address when it cannot listen.
  static absl::StatusOr<std::unique_ptr<MonitoringServer>> Start(
      const MonitoringOptions& options,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~MonitoringServer();

  MonitoringServer(const MonitoringServer&) = delete;
  MonitoringServer& operator=(const MonitoringServer&) = delete;

  int port() const { return port_; }

 private:
  MonitoringServer() = default;
  // Writes the port file and logs where the metrics are.
  static absl::StatusOr<std::unique_ptr<MonitoringServer>> Finish(
      std::unique_ptr<MonitoringServer> server,
      const MonitoringOptions& options, const std::string& host);

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<TlsMetricsServer> tls_server_;
  int port_ = 0;
};

// Builds the metric families of a collector that reads its figures at
// scrape time (prometheus-cpp's data model: the text format is written by
// prometheus-cpp). Thread-compatible.
class FamilyBuilder {
 public:
  FamilyBuilder(std::string name, std::string help, prometheus::MetricType type)
      : family_{std::move(name), std::move(help), type, {}} {}

  // A sample with `labels` ({name, value} pairs); a counter's or gauge's
  // value by the family's type.
  FamilyBuilder& Add(std::vector<prometheus::ClientMetric::Label> labels,
                     double value);
  // Moves the family to `out` when it has samples; the builder is empty
  // afterwards.
  void AppendTo(std::vector<prometheus::MetricFamily>* out);

 private:
  prometheus::MetricFamily family_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_MONITORING_MONITORING_H_
