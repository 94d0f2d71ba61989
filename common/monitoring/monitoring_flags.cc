// The monitoring flags, shared by pserver and trainer (docs/monitoring.md).
// Each also reads SHARDPS_<FLAG>.
#include "absl/strings/str_cat.h"
#include "common/monitoring/monitoring.h"
#include "gflags/gflags.h"

DEFINE_int32(monitoring_port, -1,
             "serve Prometheus metrics at http://<monitoring_host>:PORT/"
             "metrics; 0 picks a free port; -1: none");
DEFINE_string(monitoring_port_file, "",
              "if set, write the bound monitoring port to this file once "
              "serving");
DEFINE_string(monitoring_host, "",
              "address the /metrics server listens on; empty: the pserver's "
              "--host, a trainer's 0.0.0.0");

DEFINE_bool(monitoring_tls, false,
            "serve /metrics over HTTPS with this process's --tls_cert_file "
            "and --tls_key_file; with --tls_ca_file, scrapers must present "
            "a certificate signed by it");

namespace shardps {

FlagGroup MonitoringFlagGroup() {
  return {"Monitoring (docs/monitoring.md)",
          {"monitoring_port", "monitoring_port_file", "monitoring_host",
           "monitoring_tls"}};
}

absl::StatusOr<MonitoringOptions> MonitoringOptionsFromFlags(
    const std::string& default_host) {
  if (FLAGS_monitoring_port < -1 || FLAGS_monitoring_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--monitoring_port must be in [-1, 65535], got ",
                     FLAGS_monitoring_port));
  }
  if (FLAGS_monitoring_port < 0 && !FLAGS_monitoring_port_file.empty()) {
    return absl::InvalidArgumentError(
        "--monitoring_port_file needs --monitoring_port (0 for a free port)");
  }
  MonitoringOptions o;
  o.host = FLAGS_monitoring_host.empty() ? default_host : FLAGS_monitoring_host;
  if (o.host.empty()) {
    return absl::InvalidArgumentError(
        "--monitoring_host is empty, and so is the address it defaults to "
        "(the pserver's --host): name one");
  }
  o.port = FLAGS_monitoring_port;
  o.port_file = FLAGS_monitoring_port_file;
  o.tls = FLAGS_monitoring_tls;
  return o;
}

}  // namespace shardps
