// ps_fuzz: sends pservers requests that no trainer would send, made from
// proto/ps_service.proto's descriptors by RequestFuzzer (every method,
// random and boundary field values, truncated, bit-flipped and random
// encodings), and reports what came back. For testing a pserver's defences
// (docs/security.md); it changes the jobs of the pservers it reaches when it
// holds their token.
//
//   ps_fuzz --pservers=127.0.0.1:7164 --requests=3000 [--seed=1]
//           [--methods=Push,Pull] [--without_token]
//           [--expect_code=UNAUTHENTICATED]
//           [--auth_token_file=PATH] [--tls_ca_file=PATH ...]
//
// Prints a count per method and status code. Exit status: 0; 1 when a
// pserver no longer answers its health service afterwards, or an answer's
// code differs from --expect_code; 2 for bad flags.
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/job_id.h"
#include "common/grpc/grpc_credentials.h"
#include "common/grpc/grpc_status.h"
#include "common/launch/address.h"
#include "common/launch/flags.h"
#include "common/transport/transport_security.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps_service.pb.h"
#include "proto/replication.pb.h"
#include "tools/request_fuzzer.h"

DEFINE_string(pservers, "", "comma-separated host:port of the targets");
DEFINE_int64(requests, 3000, "requests to send, spread over the pservers");
DEFINE_double(duration_s, 0, "stop after this many seconds; 0: no limit");
DEFINE_uint64(seed, 1, "seed of the requests (the same seed, the same ones)");
DEFINE_int32(concurrency, 8, "requests in flight at once");
DEFINE_string(
    methods, "",
    "comma-separated methods to fuzz only (as Push,OpenSharedMemory); "
    "empty: every method of the service");
DEFINE_int32(deadline_ms, 2000, "deadline of each request");
DEFINE_bool(without_token, false,
            "send no token even with --auth_token_file (to check that the "
            "pservers refuse such calls)");
DEFINE_string(job_id, "",
              "the job named in every request's metadata; "
              "empty: none (the default job)");
DEFINE_string(expect_code, "",
              "if set (e.g. UNAUTHENTICATED), every answer must have this "
              "status code");

namespace shardps {
namespace {

struct Target {
  std::string address;
  std::unique_ptr<grpc::GenericStub> stub;
};

class Fuzz {
 public:
  Fuzz(std::vector<Target> targets, std::string authorization)
      : targets_(std::move(targets)),
        authorization_(std::move(authorization)),
        fuzzer_({PushRequest::descriptor()->file()->FindServiceByName(
                     "ParameterServer"),
                 ForwardRequest::descriptor()->file()->FindServiceByName(
                     "Replication")},
                FLAGS_seed) {}

  absl::Status OnlyMethods(const std::vector<std::string>& names) {
    return fuzzer_.OnlyMethods(names);
  }

  // Sends the requests; returns how many were sent.
  int64_t Run() {
    const absl::Time end = FLAGS_duration_s > 0
                               ? absl::Now() + absl::Seconds(FLAGS_duration_s)
                               : absl::InfiniteFuture();
    int64_t sent = 0;
    for (; sent < FLAGS_requests && absl::Now() < end; ++sent) {
      {
        absl::MutexLock l(&mu_);
        auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return in_flight_ < FLAGS_concurrency;
        };
        mu_.Await(absl::Condition(&room));
        ++in_flight_;
      }
      Send(targets_[sent % targets_.size()], fuzzer_.Next());
    }
    absl::MutexLock l(&mu_);
    auto idle = [this]()
                    ABSL_SHARED_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.Await(absl::Condition(&idle));
    return sent;
  }

  std::vector<Target>& targets() { return targets_; }

  // "Push UNAUTHENTICATED 120" lines; counts answers whose code is not
  // `expect` (when set).
  int64_t Report(const std::string& expect) {
    absl::MutexLock l(&mu_);
    int64_t unexpected = 0;
    for (const auto& [key, n] : counts_) {
      std::cout << key.first << " " << key.second << " " << n << "\n";
      if (!expect.empty() && key.second != expect) unexpected += n;
    }
    return unexpected;
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
    std::string method;
  };

  void Send(Target& t, FuzzRequest q) {
    auto call = std::make_shared<Call>();
    call->method = q.method->name();
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(FLAGS_deadline_ms));
    if (!authorization_.empty()) {
      call->ctx.AddMetadata(kAuthorizationMetadataKey, authorization_);
    }
    if (!FLAGS_job_id.empty())
      call->ctx.AddMetadata(kJobMetadataKey, FLAGS_job_id);
    grpc::Slice slice(q.bytes);
    call->request = grpc::ByteBuffer(&slice, 1);
    t.stub->UnaryCall(&call->ctx, q.path, grpc::StubOptions(), &call->request,
                      &call->response, [this, call](grpc::Status s) {
                        const std::string code(
                            absl::StatusCodeToString(FromGrpcStatus(s).code()));
                        absl::MutexLock l(&mu_);
                        ++counts_[{call->method, code}];
                        --in_flight_;
                      });
  }

  std::vector<Target> targets_;
  const std::string authorization_;
  RequestFuzzer fuzzer_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<std::string, std::string>, int64_t> counts_
      ABSL_GUARDED_BY(mu_);
};

// True when the target's health service answers (no token needed).
bool Healthy(Target& t) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;
  absl::Notification done;
  grpc::Status status;
  t.stub->UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                    &req, &resp, [&](grpc::Status s) {
                      status = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  return status.ok();
}

// A generic stub per address of --pservers, secured by `security`; the
// first address that does not parse is an error.
absl::StatusOr<std::vector<Target>> ConnectTargets(
    const TransportSecurity& security) {
  std::vector<Target> targets;
  for (absl::string_view a :
       absl::StrSplit(FLAGS_pservers, ',', absl::SkipWhitespace())) {
    auto addr = NormalizeAddress(std::string(a));
    if (!addr.ok()) return addr.status();
    grpc::ChannelArguments args;
    AddChannelSecurityArgs(security, &args);
    targets.push_back(
        {*addr, std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
                    *addr, ChannelCredentialsFor(security), args))});
  }
  return targets;
}

// Prints the count per method and code, the "sent" line and each target's
// health; returns the exit status (1 when an answer's code was not
// --expect_code or a target no longer answers, else 0).
int ReportResults(Fuzz& fuzz, int64_t sent, absl::Time start, bool with_token) {
  const int64_t unexpected = fuzz.Report(FLAGS_expect_code);
  std::cout << "sent " << sent << " requests in "
            << absl::FormatDuration(absl::Now() - start) << " ("
            << (with_token ? "with" : "without") << " token)\n";
  int status = 0;
  if (unexpected > 0) {
    std::cout << unexpected << " answers were not " << FLAGS_expect_code
              << "\n";
    status = 1;
  }
  for (Target& t : fuzz.targets()) {
    const bool up = Healthy(t);
    std::cout << t.address << ": " << (up ? "serving" : "NOT ANSWERING")
              << "\n";
    if (!up) status = 1;
  }
  return status;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "ps_fuzz --pservers=host:port,... --requests=N [--without_token]");
  absl::Status parsed = ParseFlagsWithEnv(&argc, &argv, ProcessEnv());
  if (!parsed.ok()) {
    std::cerr << "ps_fuzz: " << parsed.message() << "\n";
    return 2;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_requests < 0 || FLAGS_concurrency < 1 || FLAGS_deadline_ms < 1 ||
      !(FLAGS_duration_s >= 0)) {
    std::cerr << "ps_fuzz: --requests, --duration_s must be >= 0; "
                 "--concurrency and --deadline_ms positive\n";
    return 2;
  }
  auto security = LoadTransportSecurity(TransportSecurityFilesFromFlags(),
                                        TransportRole::kClient);
  if (!security.ok()) {
    std::cerr << "ps_fuzz: " << security.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::vector<Target>> targets = ConnectTargets(*security);
  if (!targets.ok()) {
    std::cerr << "ps_fuzz: --pservers: " << targets.status().message() << "\n";
    return 2;
  }
  if (targets->empty()) {
    std::cerr << "ps_fuzz: --pservers is required\n";
    return 2;
  }
  const std::string authorization =
      security->auth_token.empty() || FLAGS_without_token
          ? ""
          : BearerMetadataValue(security->auth_token);
  Fuzz fuzz(std::move(targets).value(), authorization);
  absl::Status only = fuzz.OnlyMethods(
      absl::StrSplit(FLAGS_methods, ',', absl::SkipWhitespace()));
  if (!only.ok()) {
    std::cerr << "ps_fuzz: --methods: " << only.message() << "\n";
    return 2;
  }
  const absl::Time start = absl::Now();
  const int64_t sent = fuzz.Run();
  return ReportResults(fuzz, sent, start, !authorization.empty());
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) { return shardps::Main(argc, argv); }
