#include "pserver/server/pserver_metrics.h"

#include <utility>

#include "common/monitoring/monitoring.h"
#include "prometheus/metric_type.h"

namespace shardps {
namespace {

using prometheus::MetricType;
using Labels = std::vector<prometheus::ClientMetric::Label>;

double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return *buckets;
}

RpcMetrics::RpcMetrics(prometheus::Registry* registry,
                       const std::vector<std::string>& methods)
    : calls_(prometheus::BuildCounter()
                 .Name("shardps_pserver_rpcs_total")
                 .Help("Calls answered, by method and gRPC status code")
                 .Register(*registry)),
      pull_wait_(prometheus::BuildHistogram()
                     .Name("shardps_pserver_pull_wait_seconds")
                     .Help("Time a pull waited in the pserver for other "
                           "trainers' pushes (sync barrier, staleness bound)")
                     .Register(*registry)
                     .Add({}, LatencyBuckets())) {
  auto& latency = prometheus::BuildHistogram()
                      .Name("shardps_pserver_rpc_duration_seconds")
                      .Help(
                          "Time from a call's arrival to its answer, "
                          "waiting included, by method")
                      .Register(*registry);
  auto& received = prometheus::BuildCounter()
                       .Name("shardps_pserver_received_bytes_total")
                       .Help("Serialized request bytes received, by method")
                       .Register(*registry);
  auto& sent = prometheus::BuildCounter()
                   .Name("shardps_pserver_sent_bytes_total")
                   .Help("Serialized response bytes sent, by method")
                   .Register(*registry);
  for (const std::string& name : methods) {
    auto m = std::make_unique<Method>();
    m->latency = &latency.Add({{"method", name}}, LatencyBuckets());
    m->received = &received.Add({{"method", name}});
    m->sent = &sent.Add({{"method", name}});
    // OK is there from the start, so that rates of errors have a base.
    m->calls[0] = &calls_.Add({{"method", name}, {"code", "OK"}});
    methods_.emplace(name, std::move(m));
  }
}

void RpcMetrics::Record(absl::string_view method, absl::StatusCode code,
                        absl::Duration latency, size_t request_bytes,
                        size_t response_bytes) {
  auto it = methods_.find(method);
  if (it == methods_.end()) return;
  Method& m = *it->second;
  m.latency->Observe(Secs(latency));
  m.received->Increment(static_cast<double>(request_bytes));
  m.sent->Increment(static_cast<double>(response_bytes));
  const int c = static_cast<int>(code);
  if (c < 0 || c >= static_cast<int>(m.calls.size())) return;
  prometheus::Counter* counter = m.calls[c].load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the existing series for the same labels, so two
    // threads racing here store the same pointer.
    counter = &calls_.Add(
        {{"method", it->first}, {"code", absl::StatusCodeToString(code)}});
    m.calls[c].store(counter, std::memory_order_release);
  }
  counter->Increment();
}

void RpcMetrics::RecordPullWait(absl::Duration wait) {
  pull_wait_.Observe(Secs(wait));
}

namespace {

// Families of per-job counters and gauges read from StoreCounters.
void AddJobCounters(const std::vector<JobStats>& jobs,
                    std::vector<prometheus::MetricFamily>* out) {
  struct Field {
    const char* name;
    const char* help;
    int64_t StoreCounters::*value;
  };
  static constexpr Field kFields[] = {
      {"shardps_pserver_pushes_total", "Pushes applied or accumulated",
       &StoreCounters::pushes},
      {"shardps_pserver_pulls_total", "Pulls answered", &StoreCounters::pulls},
      {"shardps_pserver_block_updates_total",
       "Optimizer applications to one block or sparse chunk",
       &StoreCounters::block_updates},
      {"shardps_pserver_rejected_requests_total",
       "Requests refused as invalid (bad step, shape, values, trainer)",
       &StoreCounters::rejected_requests},
      {"shardps_pserver_pull_timeouts_total",
       "Pulls answered DEADLINE_EXCEEDED after --max_pull_wait_s",
       &StoreCounters::pull_timeouts},
      {"shardps_pserver_duplicate_pushes_total",
       "Block pushes seen twice (retries) and not applied again",
       &StoreCounters::duplicate_block_pushes},
      {"shardps_pserver_late_pushes_total",
       "Block pushes after their step was applied (backup workers)",
       &StoreCounters::late_block_pushes},
      {"shardps_pserver_rollbacks_total",
       "Rollbacks of a running job to a checkpoint", &StoreCounters::rollbacks},
      {"shardps_pserver_trainers_dropped_total",
       "Trainers dropped from the barrier (silent or stalling past "
       "--trainer_timeout)",
       &StoreCounters::dropped_trainers},
      {"shardps_pserver_trainers_rejoined_total",
       "Trainers that came back (restarted, or after a drop)",
       &StoreCounters::rejoined_trainers},
  };
  for (const Field& f : kFields) {
    FamilyBuilder b(f.name, f.help, MetricType::Counter);
    for (const JobStats& j : jobs) {
      b.Add({{"job_id", j.id}}, static_cast<double>(j.counters.*f.value));
    }
    b.AppendTo(out);
  }
  FamilyBuilder ready("shardps_pserver_job_ready",
                      "1 once the job's chief has initialised it",
                      MetricType::Gauge);
  FamilyBuilder live("shardps_pserver_trainers",
                     "Trainers in the job's barrier now", MetricType::Gauge);
  FamilyBuilder waiting("shardps_pserver_waiting_pulls", "Pulls waiting now",
                        MetricType::Gauge);
  for (const JobStats& j : jobs) {
    ready.Add({{"job_id", j.id}}, j.ready ? 1 : 0);
    live.Add({{"job_id", j.id}}, j.live_trainers);
    waiting.Add({{"job_id", j.id}}, static_cast<double>(j.waiting_pulls));
  }
  ready.AppendTo(out);
  live.AppendTo(out);
  waiting.AppendTo(out);
}

// Steps applied and memory per table.
void AddTables(const std::vector<JobStats>& jobs,
               std::vector<prometheus::MetricFamily>* out) {
  FamilyBuilder steps("shardps_pserver_table_steps",
                      "Steps applied to the table's parameters held here "
                      "(the most among its blocks)",
                      MetricType::Gauge);
  FamilyBuilder non_finite(
      "shardps_pserver_non_finite_updates_total",
      "Updates not applied because they would have made a value or optimizer "
      "state infinite or NaN: a dense block's step or push, a sparse row's",
      MetricType::Counter);
  FamilyBuilder memory("shardps_pserver_memory_bytes",
                       "Memory held by the job's parameters and optimizer "
                       "state: dense blocks (values, gradient sums, "
                       "optimizer slots), and sparse rows",
                       MetricType::Gauge);
  for (const JobStats& j : jobs) {
    for (const auto& t : j.tables) {
      steps.Add({{"job_id", j.id}, {"table", t.name}},
                static_cast<double>(t.steps));
      non_finite.Add({{"job_id", j.id}, {"table", t.name}},
                     static_cast<double>(t.non_finite_updates));
    }
    memory.Add({{"job_id", j.id}, {"kind", "dense"}},
               static_cast<double>(j.dense_bytes));
    double sparse_bytes = 0;
    for (const auto& t : j.sparse) {
      sparse_bytes += static_cast<double>(t.memory_bytes);
    }
    memory.Add({{"job_id", j.id}, {"kind", "sparse"}}, sparse_bytes);
  }
  for (FamilyBuilder* b : {&steps, &non_finite, &memory}) b->AppendTo(out);
}

// The disk tiers of the sparse tables that have one: rows on disk, rows
// moved, errors.
void AddSparseDiskTiers(const std::vector<JobStats>& jobs,
                        std::vector<prometheus::MetricFamily>* out) {
  FamilyBuilder disk_rows("shardps_pserver_sparse_disk_rows",
                          "Rows of the sparse table on disk here (RocksDB's "
                          "estimate)",
                          MetricType::Gauge);
  FamilyBuilder moved("shardps_pserver_sparse_disk_moves_total",
                      "Rows moved by the disk tier, by direction (spilled: "
                      "written to disk to make room in memory; loaded: read "
                      "back to be updated)",
                      MetricType::Counter);
  FamilyBuilder disk_errors("shardps_pserver_sparse_disk_errors_total",
                            "Rows the disk tier failed to read or write "
                            "(their updates dropped, or pulls answered with "
                            "initial values)",
                            MetricType::Counter);
  for (const JobStats& j : jobs) {
    for (const auto& t : j.sparse) {
      if (!t.counters.on_disk) continue;
      const Labels l{{"job_id", j.id}, {"table", t.name}};
      disk_rows.Add(l, static_cast<double>(t.counters.disk_rows));
      moved.Add({{"job_id", j.id}, {"table", t.name}, {"dir", "spilled"}},
                static_cast<double>(t.counters.spilled_rows));
      moved.Add({{"job_id", j.id}, {"table", t.name}, {"dir", "loaded"}},
                static_cast<double>(t.counters.loaded_rows));
      disk_errors.Add(l, static_cast<double>(t.counters.disk_errors));
    }
  }
  for (FamilyBuilder* b : {&disk_rows, &moved, &disk_errors}) b->AppendTo(out);
}

// Each sparse table's rows: held, created, evicted, refused, its share.
void AddSparseTables(const std::vector<JobStats>& jobs,
                     std::vector<prometheus::MetricFamily>* out) {
  FamilyBuilder rows("shardps_pserver_sparse_rows",
                     "Rows of the sparse table held here", MetricType::Gauge);
  FamilyBuilder created("shardps_pserver_sparse_rows_created_total",
                        "Rows of the sparse table created here",
                        MetricType::Counter);
  FamilyBuilder evicted("shardps_pserver_sparse_rows_evicted_total",
                        "Rows of the sparse table evicted here, by reason "
                        "(full: to make room for new rows in its memory "
                        "share; expired: TTL, norm or evict_after_steps)",
                        MetricType::Counter);
  FamilyBuilder max_rows("shardps_pserver_sparse_rows_max",
                         "The rows the sparse table's memory share holds "
                         "here (0: no limit)",
                         MetricType::Gauge);
  FamilyBuilder refused("shardps_pserver_sparse_rows_refused_total",
                        "New rows refused: no room in the memory share "
                        "that eviction could free",
                        MetricType::Counter);
  FamilyBuilder table_memory("shardps_pserver_sparse_memory_bytes",
                             "Memory held by the sparse table's rows and "
                             "their optimizer state",
                             MetricType::Gauge);
  for (const JobStats& j : jobs) {
    for (const auto& t : j.sparse) {
      const Labels l{{"job_id", j.id}, {"table", t.name}};
      rows.Add(l, static_cast<double>(t.counters.rows));
      created.Add(l, static_cast<double>(t.counters.created));
      evicted.Add({{"job_id", j.id}, {"table", t.name}, {"reason", "full"}},
                  static_cast<double>(t.counters.evicted_full));
      evicted.Add({{"job_id", j.id}, {"table", t.name}, {"reason", "expired"}},
                  static_cast<double>(t.counters.expired));
      max_rows.Add(l, static_cast<double>(t.counters.max_rows));
      refused.Add(l, static_cast<double>(t.counters.refused_rows));
      table_memory.Add(l, static_cast<double>(t.memory_bytes));
    }
  }
  for (FamilyBuilder* b :
       {&rows, &created, &evicted, &max_rows, &refused, &table_memory}) {
    b->AppendTo(out);
  }
}

void AddCheckpoints(const std::vector<JobStats>& jobs,
                    std::vector<prometheus::MetricFamily>* out) {
  FamilyBuilder written(
      "shardps_pserver_checkpoints_total",
      "Checkpoint writes, by result (no_room: refused, the disk being full)",
      MetricType::Counter);
  FamilyBuilder duration("shardps_pserver_last_checkpoint_duration_seconds",
                         "How long the last complete checkpoint took to "
                         "write",
                         MetricType::Gauge);
  FamilyBuilder size("shardps_pserver_last_checkpoint_size_bytes",
                     "Payload bytes of the last complete checkpoint",
                     MetricType::Gauge);
  FamilyBuilder step("shardps_pserver_last_checkpoint_step",
                     "Step of the last complete checkpoint written",
                     MetricType::Gauge);
  FamilyBuilder time("shardps_pserver_last_checkpoint_timestamp_seconds",
                     "When the last complete checkpoint was written (Unix "
                     "time)",
                     MetricType::Gauge);
  for (const JobStats& j : jobs) {
    if (!j.checkpoints) continue;
    const Checkpointer::Stats& c = j.checkpoint;
    written.Add({{"job_id", j.id}, {"result", "ok"}},
                static_cast<double>(c.written));
    written.Add({{"job_id", j.id}, {"result", "failed"}},
                static_cast<double>(c.failed));
    written.Add({{"job_id", j.id}, {"result", "no_room"}},
                static_cast<double>(c.no_room));
    if (c.written == 0) continue;
    const Labels l{{"job_id", j.id}};
    duration.Add(l, Secs(c.last_duration));
    size.Add(l, static_cast<double>(c.last_bytes));
    step.Add(l, static_cast<double>(c.last_step));
    time.Add(l, absl::ToDoubleSeconds(c.last_time - absl::UnixEpoch()));
  }
  for (FamilyBuilder* b : {&written, &duration, &size, &step, &time}) {
    b->AppendTo(out);
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> PserverCollector::Collect() const {
  const std::vector<JobStats> jobs = pserver_->Stats();
  std::vector<prometheus::MetricFamily> out;
  FamilyBuilder("shardps_pserver_jobs", "Jobs held now", MetricType::Gauge)
      .Add({}, static_cast<double>(jobs.size()))
      .AppendTo(&out);
  FamilyBuilder("shardps_pserver_memory_used_bytes",
                "Memory all jobs' tables and optimizer state hold, counted "
                "against --max_memory_mb",
                MetricType::Gauge)
      .Add({}, static_cast<double>(pserver_->memory_used_bytes()))
      .AppendTo(&out);
  FamilyBuilder("shardps_pserver_memory_limit_bytes",
                "--max_memory_mb in bytes (0: no limit)", MetricType::Gauge)
      .Add({}, static_cast<double>(pserver_->memory_limit_bytes()))
      .AppendTo(&out);
  AddJobCounters(jobs, &out);
  AddTables(jobs, &out);
  AddSparseTables(jobs, &out);
  AddSparseDiskTiers(jobs, &out);
  AddCheckpoints(jobs, &out);
  return out;
}

}  // namespace shardps
