// A protobuf message as JSON the way Go's protojson.Marshal writes it with default options,
// which is what envoyproxy/ratelimit's /json endpoint sends: lowerCamelCase names, enum names,
// fields at their default value left out, compact, and fields in the order the .proto file
// declares them. That order is the difference from protobuf's C++ printer, which writes fields
// by number: envoy's RateLimitResponse.RateLimit declares `name` (3) before
// `requests_per_unit` (1), so a named limit reads {"name":...,"requestsPerUnit":...,"unit":...}.
//
// Well-known types have JSON forms of their own: google.protobuf.Struct (dynamic_metadata) is
// written here with its keys sorted, as protojson writes a map; the others (Duration, ...) by
// protobuf's printer. Every other message is walked here.

#ifndef SLUICE_RLS_PROTO_JSON_H_
#define SLUICE_RLS_PROTO_JSON_H_

#include <google/protobuf/message.h>

#include <string>

namespace sluice::rls {

// Appends `message` to `out`; false if protobuf's printer refused a well-known type's value.
bool AppendProtoJson(const google::protobuf::Message& message, std::string* out);

}  // namespace sluice::rls

#endif  // SLUICE_RLS_PROTO_JSON_H_
