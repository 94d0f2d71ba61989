#ifndef SHARDPS_PSERVER_SERVER_PSERVER_METRICS_H_
#define SHARDPS_PSERVER_SERVER_PSERVER_METRICS_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "pserver/server/pserver.h"

namespace shardps {

// The pserver's Prometheus metrics (docs/monitoring.md lists them). Plain
// C++ over prometheus-cpp's data model: the gRPC binding reports each call
// to RpcMetrics; PserverCollector reads the jobs' figures at scrape time.

// What the transport sees of each call: latency histograms and calls by
// status code per method, bytes received and sent, and how long pulls
// waited in a barrier. Thread-safe.
class RpcMetrics {
 public:
  // Registers the families in `registry`, which must outlive this object.
  // `methods` are the RPC names that Record() accepts.
  RpcMetrics(prometheus::Registry* registry,
             const std::vector<std::string>& methods);

  // A finished call of `method` (one of those given at construction; others
  // are ignored): its latency, status, and the serialized sizes of the
  // request and the response.
  void Record(absl::string_view method, absl::StatusCode code,
              absl::Duration latency, size_t request_bytes,
              size_t response_bytes);
  // A pull answered after waiting `wait` for other trainers' pushes (the
  // sync barrier or the staleness bound).
  void RecordPullWait(absl::Duration wait);

 private:
  struct Method {
    prometheus::Histogram* latency;
    prometheus::Counter* received;
    prometheus::Counter* sent;
    // Calls by absl::StatusCode (0..16), made on first use.
    std::array<std::atomic<prometheus::Counter*>, 17> calls{};
  };

  prometheus::Family<prometheus::Counter>& calls_;
  prometheus::Histogram& pull_wait_;
  // Fixed after construction: read without a lock.
  absl::flat_hash_map<std::string, std::unique_ptr<Method>> methods_;
};

// The per-job figures of a Pserver (Pserver::Stats) and its memory budget,
// as metric families built at each scrape. Thread-safe.
class PserverCollector : public prometheus::Collectable {
 public:
  // `pserver` must outlive the collector.
  explicit PserverCollector(const Pserver* pserver) : pserver_(pserver) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Pserver* const pserver_;
};

// The latency buckets, in seconds, of RPCs and pull waits: 100 us to 60 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

}  // namespace shardps

#endif  // SHARDPS_PSERVER_SERVER_PSERVER_METRICS_H_
