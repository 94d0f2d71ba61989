#include "common/monitoring/monitoring.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/http_get.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

// Static TLS as large as the trainer's (cuBLASLt, cuBLAS, OpenBLAS, glog):
// more than the 100 KiB stacks civetweb asks for.
thread_local char big_tls[256 << 10];

namespace shardps {
namespace {

using ::testing::HasSubstr;
using testing::HttpGet;
using testing::ScopedTempDir;
using ::testing::StartsWith;

MonitoringOptions Loopback(int port) {
  MonitoringOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  return o;
}

// A collector that reads its figure at scrape time, as the pserver's does.
class OneGauge : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    FamilyBuilder("shardps_test_rows", "Rows.", prometheus::MetricType::Gauge)
        .Add({{"job_id", "a"}}, value)
        .Add({{"job_id", "b"}}, 2 * value)
        .AppendTo(&out);
    FamilyBuilder("shardps_test_empty", "No samples.",
                  prometheus::MetricType::Counter)
        .AppendTo(&out);
    return out;
  }
  double value = 0;
};

TEST(MonitoringServerTest, ServesRegistriesAndCollectorsOnAFreePort) {
  ScopedTempDir dir("monitoring");
  auto registry = std::make_shared<prometheus::Registry>();
  auto& pushes = prometheus::BuildCounter()
                     .Name("shardps_test_pushes_total")
                     .Help("Pushes.")
                     .Register(*registry)
                     .Add({});
  auto gauge = std::make_shared<OneGauge>();
  MonitoringOptions o = Loopback(0);
  o.port_file = dir.Path("port");
  auto server = MonitoringServer::Start(o, {registry, gauge});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  std::ifstream f(o.port_file);
  int written = 0;
  f >> written;
  EXPECT_EQ(written, port);

  pushes.Increment(3);
  gauge->value = 7;
  const std::string page = HttpGet(port, "/metrics");
  EXPECT_THAT(page, StartsWith("HTTP/1.1 200 "));
  EXPECT_THAT(page, HasSubstr("# TYPE shardps_test_pushes_total counter"));
  EXPECT_THAT(page, HasSubstr("shardps_test_pushes_total 3"));
  EXPECT_THAT(page, HasSubstr("shardps_test_rows{job_id=\"a\"} 7"));
  EXPECT_THAT(page, HasSubstr("shardps_test_rows{job_id=\"b\"} 14"));
  // A family without samples is left out rather than written empty.
  EXPECT_THAT(page, ::testing::Not(HasSubstr("shardps_test_empty")));
  EXPECT_THAT(HttpGet(port, "/other"), HasSubstr(" 404 Not Found"));
}

TEST(MonitoringServerTest, StartsBesideLargeStaticTls) {
  big_tls[0] = 1;  // keep it
  auto server = MonitoringServer::Start(
      Loopback(0), {std::make_shared<prometheus::Registry>()});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(HttpGet((*server)->port(), "/metrics"),
              StartsWith("HTTP/1.1 200 "));
}

// A connection to 127.0.0.1:port that has sent `bytes` and stays open;
// -1 when it cannot connect.
int HalfSent(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::write(fd, bytes.data(), bytes.size()) !=
          static_cast<ssize_t>(bytes.size())) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

TEST(MonitoringServerTest, HalfSentRequestsDoNotBlindScrapes) {
  MonitoringOptions o = Loopback(0);
  o.threads = 2;
  o.request_timeout = absl::Milliseconds(500);
  auto server = MonitoringServer::Start(o, {std::make_shared<OneGauge>()});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  // As many half-sent requests as threads: each holds one until the
  // request timeout, and no longer.
  std::vector<int> stalled;
  for (int i = 0; i < o.threads; ++i) {
    stalled.push_back(HalfSent(port, "GET /metrics HTTP/1.1\r\nHo"));
    ASSERT_GE(stalled.back(), 0);
  }
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time start = absl::Now();
  EXPECT_THAT(HttpGet(port, "/metrics"), StartsWith("HTTP/1.1 200 "));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int fd : stalled) ::close(fd);
  // One thread and one half-sent request: the scrape waits for the
  // timeout, not more.
  o.threads = 1;
  auto one = MonitoringServer::Start(o, {std::make_shared<OneGauge>()});
  ASSERT_TRUE(one.ok()) << one.status();
  const int held = HalfSent((*one)->port(), "GET /met");
  ASSERT_GE(held, 0);
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time again = absl::Now();
  EXPECT_THAT(HttpGet((*one)->port(), "/metrics"), StartsWith("HTTP/1.1 200 "));
  EXPECT_LT(absl::Now() - again, absl::Seconds(5));
  ::close(held);
}

TEST(MonitoringServerTest, RefusesNoThreadsOrNoTimeout) {
  MonitoringOptions o = Loopback(0);
  o.threads = 0;
  EXPECT_EQ(MonitoringServer::Start(o, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Loopback(0);
  o.request_timeout = absl::ZeroDuration();
  EXPECT_EQ(MonitoringServer::Start(o, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MonitoringServerTest, APortInUseIsUnavailableNamingTheAddress) {
  auto first = MonitoringServer::Start(Loopback(0), {});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MonitoringServer::Start(Loopback((*first)->port()), {});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", (*first)->port())));
}

TEST(MonitoringServerTest, RefusesAPortOutOfRange) {
  for (int port : {-1, 65536}) {
    auto s = MonitoringServer::Start(Loopback(port), {});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << port;
  }
}

TEST(MonitoringServerTest, AnUnwritablePortFileIsAnError) {
  MonitoringOptions o = Loopback(0);
  o.port_file = "/nonexistent-dir/port";
  auto s = MonitoringServer::Start(o, {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.status().message()),
              HasSubstr("--monitoring_port_file"));
}

// TlsMetricsServer's refusals at start (tests/monitoring_test.py scrapes
// it over HTTPS).
TEST(MonitoringServerTest, TlsRefusesBadCertificatesAndKeys) {
  ScopedTempDir dir("monitoring_tls");
  for (const char* name : {"a", "b"}) {
    const std::string cmd =
        absl::StrCat("bash ", PS_SOURCE_DIR, "/scripts/cluster/make_certs.sh ",
                     dir.Path(name), " >/dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  auto read = [&](const std::string& path) {
    return testing::ReadFileOrFail(Env::Default(), dir.Path(path));
  };
  MonitoringOptions o = Loopback(0);
  o.tls = true;
  EXPECT_THAT(o.UseTls("", "", "").message(), HasSubstr("--tls_cert_file"));
  ASSERT_TRUE(o.UseTls(read("a/server.pem"), read("a/server.key"), "").ok());
  auto server = MonitoringServer::Start(o, {});
  ASSERT_TRUE(server.ok()) << server.status();
  // Its port is taken.
  o.port = (*server)->port();
  absl::Status s = MonitoringServer::Start(o, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("cannot listen on 127.0.0.1:"));
  o.port = 0;
  o.tls_key_pem = read("b/server.key");
  s = MonitoringServer::Start(o, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the key is not the certificate's"));
  o.tls_cert_pem = "-----BEGIN CERTIFICATE-----\nnot one\n";
  EXPECT_THAT(MonitoringServer::Start(o, {}).status().message(),
              HasSubstr("the certificate does not read"));
  o.tls_cert_pem = read("a/server.pem");
  o.tls_key_pem = read("a/server.key");
  o.tls_ca_pem = "no certificate here";
  EXPECT_THAT(MonitoringServer::Start(o, {}).status().message(),
              HasSubstr("the CA file holds no certificate"));
}

}  // namespace
}  // namespace shardps
