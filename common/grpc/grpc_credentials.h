#ifndef SHARDPS_COMMON_GRPC_GRPC_CREDENTIALS_H_
#define SHARDPS_COMMON_GRPC_GRPC_CREDENTIALS_H_

#include <memory>
#include <string>

#include "common/transport/transport_security.h"
#include "grpcpp/grpcpp.h"

namespace shardps {

// The metadata a client sends its token in: `authorization: Bearer <token>`,
// the convention of gRPC clients in every language.
inline constexpr char kAuthorizationMetadataKey[] = "authorization";
std::string BearerMetadataValue(const std::string& token);

// The call's auth context property naming the pserver that made it, by its
// token (--peer_identities_file): its address in the job's pserver list.
inline constexpr char kPeerIdentityProperty[] = "shardps-peer";

// The gRPC health service, which answers without a token (load balancers
// and orchestrators probe it).
inline constexpr char kHealthServicePrefix[] = "/grpc.health.v1.Health/";

// The pserver's listening credentials: TLS (mutual when it has a CA) or
// plaintext and, with a token, gRPC's auth metadata processor in front of
// every method but the health service: a call without the token, or with
// another, is answered UNAUTHENTICATED before its request is read.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(
    const TransportSecurity& security);

// A client's channel credentials (TLS or plaintext) and the channel
// arguments they need (the TLS target name). The token is not part of them:
// GrpcPsClient adds it to every call.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(
    const TransportSecurity& security);
void AddChannelSecurityArgs(const TransportSecurity& security,
                            grpc::ChannelArguments* args);

}  // namespace shardps

#endif  // SHARDPS_COMMON_GRPC_GRPC_CREDENTIALS_H_
