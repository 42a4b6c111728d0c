// The /json endpoint of the HTTP service, bound to src/rls's codec.
//
// src/http serves POST /json through an http::JsonEndpoint and does not speak RLS; src/rls has
// the protocol and does not know HTTP. This is where the two meet, above both.

#ifndef SLUICE_CLI_RLS_JSON_ENDPOINT_H_
#define SLUICE_CLI_RLS_JSON_ENDPOINT_H_

#include "http/json_endpoint.h"

namespace sluice::cli {

// rls::AnswerJson as an http::JsonEndpoint (for http::Service::SetJsonEndpoint).
http::JsonEndpoint RlsJsonEndpoint();

}  // namespace sluice::cli

#endif  // SLUICE_CLI_RLS_JSON_ENDPOINT_H_
