#include "common/grpc/grpc_health.h"

#include "absl/strings/str_cat.h"
#include "common/grpc/grpc_credentials.h"
#include "common/launch/port_file.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/health.grpc.pb.h"

namespace shardps {

// A server needs one service beside the health service to poll its
// completion queue: a generic one, answering UNIMPLEMENTED to the rest.
struct GrpcHealthServer::Services {
  grpc::CallbackGenericService generic;
};

GrpcHealthServer::GrpcHealthServer() : services_(new Services) {}

GrpcHealthServer::~GrpcHealthServer() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
}

absl::StatusOr<std::unique_ptr<GrpcHealthServer>> GrpcHealthServer::Start(
    const std::string& host, int port, const std::string& port_file) {
  std::unique_ptr<GrpcHealthServer> s(new GrpcHealthServer);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const std::string addr = absl::StrCat(host, ":", port);
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &s->port_);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterCallbackGenericService(&s->services_->generic);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    s->server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", addr, " (is the port in use?)"));
  }
  s->SetServing(false);
  if (!port_file.empty()) {
    absl::Status w = WritePortFile(port_file, s->port_, "--health_port_file");
    if (!w.ok()) return w;
  }
  return s;
}

void GrpcHealthServer::SetServing(bool serving) {
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

absl::StatusOr<std::string> CheckHealth(const std::string& address,
                                        const TransportSecurity& security,
                                        absl::Duration timeout) {
  grpc::ChannelArguments args;
  AddChannelSecurityArgs(security, &args);
  auto channel =
      grpc::CreateCustomChannel(address, ChannelCredentialsFor(security), args);
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   absl::ToChronoMilliseconds(timeout));
  ctx.set_wait_for_ready(true);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        s.error_message());
  }
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
      resp.status());
}

}  // namespace shardps
