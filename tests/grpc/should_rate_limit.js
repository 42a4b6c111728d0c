// One RLS v3 ShouldRateLimit call: prints the overall code and each descriptor's limit
// (OK 2/DAY), or the error's gRPC status name. Used by tests/envoy_env_e2e.sh.
//
// Usage: node should_rate_limit.js HOST:PORT DOMAIN KEY VALUE (answers within 5 s)

'use strict';

const {grpc, loadProtos} = require('./testing');

const [target, domain, key, value] = process.argv.slice(2);
if (!value) {
  console.error('usage: node should_rate_limit.js HOST:PORT DOMAIN KEY VALUE');
  process.exit(2);
}
const loaded = loadProtos(['envoy/service/ratelimit/v3/rls.proto'],
                          {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true});
const rls = new loaded.envoy.service.ratelimit.v3.RateLimitService(
    target, grpc.credentials.createInsecure());
const request = {domain, descriptors: [{entries: [{key, value}]}], hits_addend: 1};
rls.ShouldRateLimit(request, {deadline: Date.now() + 5000}, (error, response) => {
  if (error) {
    console.log(grpc.status[error.code]);
  } else {
    const limits = response.statuses.map(
        (s) => s.current_limit ? `${s.current_limit.requests_per_unit}/${s.current_limit.unit}` : '-');
    console.log(`${response.overall_code} ${limits.join(' ')}`);
  }
  rls.close();
});
