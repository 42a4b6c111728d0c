// The rules that come over xDS: a state-of-the-world DiscoveryResponse of envoyproxy/ratelimit's
// RateLimitConfig resources (one domain each; src/rls/proto/ratelimit/config/ratelimit/v3/
// rls_conf.proto) made into the domain trees that the rules loader reads from YAML files, so that
// they go through the same validation and reload path as files (rules::ConfigManager::Apply).
//
// The mapping is upstream's (envoyproxy/ratelimit src/config/config_xds.go): every field of a
// descriptor and of its rate_limit keeps its YAML name; the unit is its enum name (UNKNOWN
// included, which the loader then refuses as upstream's does, but left out of an unlimited
// limit, which must have none); metadata, a
// google.protobuf.Struct, becomes the YAML map it stands for.

#ifndef SLUICE_XDS_RATE_LIMIT_CONFIG_H_
#define SLUICE_XDS_RATE_LIMIT_CONFIG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "envoy/service/discovery/v3/discovery.pb.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "rules/loader.h"

namespace sluice::xds {

// The type URL of the resources sluice asks for and reads.
inline constexpr char kRateLimitConfigType[] =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

// One resource as the loader reads it: named "xds:NAME" (or "xds:#INDEX" without a name).
rules::RemoteDomain ToRemoteDomain(const ratelimit::config::ratelimit::v3::RateLimitConfig& config,
                                   int index, uint64_t hash);

// Every resource of `response`. An error (InvalidArgument, naming the resource) when one is not a
// RateLimitConfig or does not decode; the loader's own checks come later, in Apply.
absl::StatusOr<std::shared_ptr<const rules::RemoteDomains>> RemoteDomainsOf(
    const envoy::service::discovery::v3::DiscoveryResponse& response);

}  // namespace sluice::xds

#endif  // SLUICE_XDS_RATE_LIMIT_CONFIG_H_
