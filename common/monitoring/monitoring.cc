#include "common/monitoring/monitoring.h"

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/launch/port_file.h"
#include "common/monitoring/tls_metrics_server.h"
#include "glog/logging.h"
#include "prometheus/exposer.h"

// civetweb, as Debian builds it, asks for 100 KiB thread stacks
// (USE_STACK_SIZE), and glibc refuses to create a thread whose stack cannot
// hold the static TLS of every loaded library: in the trainer, cuBLASLt,
// cuBLAS, OpenBLAS and glog take about 200 KiB of it, so the /metrics
// server could not start ("Cannot create threads"). Every stack size asked
// for in this process is therefore raised to at least kMinThreadStack. The
// binaries export this symbol (ps_monitoring's link options), so that it
// takes the place of glibc's for the libraries too.
namespace {
constexpr size_t kMinThreadStack = size_t{2} << 20;
}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr,
                                         size_t stacksize) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real =
      reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real(attr, std::max(stacksize, kMinThreadStack));
}

namespace shardps {
namespace {

// The options of the TLS server of /metrics (options.tls).
TlsMetricsServer::Options TlsOptions(const MonitoringOptions& options) {
  TlsMetricsServer::Options t;
  t.host = options.host;
  t.port = options.port;
  t.cert_pem = options.tls_cert_pem;
  t.key_pem = options.tls_key_pem;
  t.ca_pem = options.tls_ca_pem;
  t.threads = options.threads;
  t.request_timeout = options.request_timeout;
  return t;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MonitoringServer>> MonitoringServer::Start(
    const MonitoringOptions& options,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--monitoring_port must be in [0, 65535], got ", options.port));
  }
  // civetweb wants an IPv6 host in brackets (--host may have them).
  const std::string host =
      options.host.find(':') != std::string::npos && options.host.front() != '['
          ? absl::StrCat("[", options.host, "]")
          : options.host;
  const std::string addr = absl::StrCat(host, ":", options.port);
  std::unique_ptr<MonitoringServer> server(new MonitoringServer);
  if (options.threads < 1 || options.request_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "/metrics needs at least 1 thread and a positive request timeout, "
        "got ",
        options.threads, " and ",
        absl::FormatDuration(options.request_timeout)));
  }
  server->collectables_ = std::move(collectables);
  if (options.tls) {
    auto tls =
        TlsMetricsServer::Start(TlsOptions(options), server->collectables_);
    if (!tls.ok()) return tls.status();
    server->tls_server_ = *std::move(tls);
    server->port_ = server->tls_server_->port();
    return Finish(std::move(server), options, host);
  }
  try {
    // civetweb's options: a scrape takes microseconds, but a client that
    // sends half a request holds its thread until the request timeout.
    server->exposer_ =
        std::make_unique<prometheus::Exposer>(std::vector<std::string>{
            "listening_ports", addr, "num_threads",
            absl::StrCat(options.threads), "request_timeout_ms",
            absl::StrCat(std::max<int64_t>(
                1, absl::ToInt64Milliseconds(options.request_timeout)))});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--monitoring_port: cannot listen on ", addr, " (",
                     e.what(), "; is the port in use?)"));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty() || ports[0] <= 0) {
    return absl::UnavailableError(
        absl::StrCat("--monitoring_port: cannot listen on ", addr));
  }
  server->port_ = ports[0];
  for (const auto& c : server->collectables_) {
    server->exposer_->RegisterCollectable(c);
  }
  return Finish(std::move(server), options, host);
}

absl::StatusOr<std::unique_ptr<MonitoringServer>> MonitoringServer::Finish(
    std::unique_ptr<MonitoringServer> server, const MonitoringOptions& options,
    const std::string& host) {
  const int port = server->port_;
  if (!options.port_file.empty()) {
    absl::Status s =
        WritePortFile(options.port_file, port, "--monitoring_port_file");
    if (!s.ok()) return s;
  }
  LOG(INFO) << "metrics on " << (options.tls ? "https" : "http") << "://"
            << host << ":" << port << "/metrics"
            << (options.tls && !options.tls_ca_pem.empty()
                    ? " (scrapers present a certificate signed by "
                      "--tls_ca_file)"
                    : "");
  return server;
}

MonitoringServer::~MonitoringServer() = default;

absl::Status MonitoringOptions::UseTls(std::string cert_pem,
                                       std::string key_pem,
                                       std::string ca_pem) {
  if (!tls) return absl::OkStatus();
  if (cert_pem.empty() || key_pem.empty()) {
    return absl::InvalidArgumentError(
        "--monitoring_tls serves /metrics with this process's certificate: "
        "give --tls_cert_file and --tls_key_file");
  }
  tls_cert_pem = std::move(cert_pem);
  tls_key_pem = std::move(key_pem);
  tls_ca_pem = std::move(ca_pem);
  return absl::OkStatus();
}

FamilyBuilder& FamilyBuilder::Add(
    std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  switch (family_.type) {
    case prometheus::MetricType::Counter:
      m.counter.value = value;
      break;
    case prometheus::MetricType::Gauge:
      m.gauge.value = value;
      break;
    default:
      m.untyped.value = value;
      break;
  }
  family_.metric.push_back(std::move(m));
  return *this;
}

void FamilyBuilder::AppendTo(std::vector<prometheus::MetricFamily>* out) {
  if (!family_.metric.empty()) out->push_back(family_);
  family_.metric.clear();
}

}  // namespace shardps
