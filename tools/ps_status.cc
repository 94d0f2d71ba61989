// Asks pservers where a job (--job_id; "default") stands: whether the job is
// ready, its mode and trainer count, the block versions held, the timeline
// (generation and the step it started from), the live trainers and the
// complete checkpoints. For an operator wondering why a job does not move.
//
//   ps_status --pservers=host1:7164,host2:7164 [--timeout_s=5]
//             [--auth_token_file=PATH] [--tls_ca_file=PATH ...]
//
// With --health it asks gRPC's health service instead (of pservers, or of
// trainers started with --health_port): one line per address, SERVING or
// NOT_SERVING, and exit status 0 only if every one is SERVING. That is the
// probe for schedulers whose own gRPC probe cannot speak TLS.
//
// Takes the token and TLS flags of the trainer (docs/security.md), and
// SHARDPS_<FLAG> environment variables as the trainer does.
// Prints one line per pserver; exit status 1 if one cannot be reached.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/grpc/grpc_health.h"
#include "common/launch/address.h"
#include "common/launch/flags.h"
#include "common/transport/transport_security.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "proto/ps_service.pb.h"
#include "trainer/transport/grpc_ps_client.h"
#include "trainer/transport/retry_timer.h"

DEFINE_string(pservers, "", "comma-separated host or host:port");
DEFINE_int32(timeout_s, 5, "how long to wait for each pserver");
DEFINE_string(job_id, "default", "the job to ask about");
DEFINE_bool(health, false,
            "ask gRPC's health service (grpc.health.v1) instead: exit 0 only "
            "if every address answers SERVING");

namespace {

// --health: one line per address; the count of those not SERVING.
int CheckHealth(const std::vector<std::string>& addrs,
                const shardps::TransportSecurity& security) {
  int bad = 0;
  for (const std::string& addr : addrs) {
    auto status =
        shardps::CheckHealth(addr, security, absl::Seconds(FLAGS_timeout_s));
    if (!status.ok()) {
      std::cout << addr << ": unreachable (" << status.status().message()
                << ")\n";
      ++bad;
      continue;
    }
    std::cout << addr << ": " << *status << "\n";
    if (*status != "SERVING") ++bad;
  }
  return bad;
}

}  // namespace

namespace {

// A sparse table's line: rows against its share, evictions, admission.
void PrintSparseTable(const shardps::GetStatusResponse& resp,
                      const shardps::SparseTableStatus& t) {
  std::cout << absl::StrCat(
                   "  sparse table ", t.name(),
                   resp.has_view() ? absl::StrCat(" shard ", t.shard()) : "",
                   ": ", t.rows(), " rows",
                   t.max_rows() > 0 ? absl::StrCat(" of ", t.max_rows()) : "",
                   " (", t.memory_bytes() >> 20, " MiB",
                   t.rows() > 0
                       ? absl::StrCat(", ", t.memory_bytes() / t.rows(),
                                      " bytes a row")
                       : "",
                   t.storage_type() != shardps::SparseTableOptions::FLOAT32
                       ? absl::StrCat(
                             ", ", shardps::SparseTableOptions::RowStorage_Name(
                                       t.storage_type()))
                       : "",
                   ")",
                   t.on_disk()
                       ? absl::StrCat(", ", t.disk_rows(), " on disk (",
                                      t.spilled_rows(), " written there, ",
                                      t.loaded_rows(), " read back, ",
                                      t.disk_errors(), " disk errors)")
                       : "",
                   ", ", t.created(), " created, ", t.evicted_full(),
                   " evicted to make room, ", t.evicted_expired(), " expired, ",
                   t.refused_rows(), " refused, ", t.pending_keys(),
                   " awaiting admission")
            << "\n";
}

// One pserver's line of GetStatus, its replication line and its sparse
// tables' lines.
void PrintStatus(const std::string& addr,
                 const shardps::GetStatusResponse& resp) {
  const std::string where =
      FLAGS_job_id == "default"
          ? addr
          : absl::StrCat(addr, " (job ", FLAGS_job_id, ")");
  if (!resp.job_ready()) {
    std::cout << where << ": no job yet (waiting for the chief)\n";
    return;
  }
  std::cout
      << absl::StrCat(
             where, ": ", resp.job().mode() == shardps::SYNC ? "sync" : "async",
             ", ", resp.job().num_trainers(),
             " trainers (live: ", absl::StrJoin(resp.live_trainers(), ","),
             "), versions ", resp.min_version(), "-", resp.max_version(),
             ", generation ", resp.generation(), " from step ",
             resp.base_step(), ", checkpoints ",
             resp.checkpoints_enabled()
                 ? absl::StrCat(
                       "[", absl::StrJoin(resp.checkpoint_steps(), ","), "]")
                 : "off")
      << "\n";
  if (resp.has_view()) {
    // Replication (docs/replication.md): the agreed view and the roles.
    const auto& v = resp.view();
    std::cout << absl::StrCat(
                     "  replication ", resp.job().replication(), ", view ",
                     v.number(), " {", absl::StrJoin(v.members(), ","), "}",
                     v.joining_size() > 0
                         ? absl::StrCat(" joining {",
                                        absl::StrJoin(v.joining(), ","), "}")
                         : "",
                     ": primary of shards {",
                     absl::StrJoin(resp.primary_shards(), ","),
                     "}, backup of {", absl::StrJoin(resp.backup_shards(), ","),
                     "}")
              << "\n";
  }
  for (const shardps::SparseTableStatus& t : resp.sparse_tables()) {
    PrintSparseTable(resp, t);
  }
}

// Asks each pserver of `addrs` for the job's status and prints its lines;
// the count of those that did not answer (unreachable or refused).
int AskStatus(const std::vector<std::string>& addrs,
              const shardps::TransportSecurity& security) {
  shardps::RetryTimer timer;
  shardps::RpcOptions rpc;
  rpc.attempt_deadline = absl::Seconds(FLAGS_timeout_s);
  rpc.retry_budget = absl::Seconds(FLAGS_timeout_s);
  rpc.job_id = FLAGS_job_id;
  int unreachable = 0;
  for (const std::string& addr : addrs) {
    auto client = shardps::GrpcPsClient::Create(addr, rpc, &timer, security);
    shardps::GetStatusRequest req;
    shardps::GetStatusResponse resp;
    absl::Status s = client->GetStatus(req, &resp);
    if (!s.ok()) {
      // Refused (a token that does not cover the job) is not unreachable.
      const bool refused =
          !absl::IsUnavailable(s) && !absl::IsDeadlineExceeded(s);
      std::cout << addr << ": "
                << (refused ? absl::StrCat("refused: ",
                                           absl::StatusCodeToString(s.code()),
                                           ": ", s.message())
                            : absl::StrCat("unreachable (", s.message(), ")"))
                << "\n";
      ++unreachable;
      continue;
    }
    PrintStatus(addr, resp);
  }
  return unreachable;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("ps_status --pservers=host1:7164,host2:7164");
  absl::Status parsed =
      shardps::ParseFlagsWithEnv(&argc, &argv, shardps::ProcessEnv());
  if (!parsed.ok()) {
    std::cerr << "ps_status: " << parsed.message() << "\n";
    return 2;
  }
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = google::GLOG_ERROR;  // no retry chatter
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_pservers.empty() || FLAGS_timeout_s <= 0) {
    std::cerr << "ps_status: needs --pservers and a positive --timeout_s\n";
    return 2;
  }
  auto security =
      shardps::LoadTransportSecurity(shardps::TransportSecurityFilesFromFlags(),
                                     shardps::TransportRole::kClient);
  if (!security.ok()) {
    std::cerr << "ps_status: " << security.status().message() << "\n";
    return 2;
  }
  std::vector<std::string> addrs;
  for (absl::string_view a :
       absl::StrSplit(FLAGS_pservers, ',', absl::SkipWhitespace())) {
    auto addr = shardps::NormalizeAddress(std::string(a));
    if (!addr.ok()) {
      std::cerr << "ps_status: " << addr.status().message() << "\n";
      return 2;
    }
    addrs.push_back(*addr);
  }
  if (FLAGS_health) return CheckHealth(addrs, *security) > 0 ? 1 : 0;
  return AskStatus(addrs, *security) > 0 ? 1 : 0;
}
