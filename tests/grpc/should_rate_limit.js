// One RLS v3 ShouldRateLimit call: prints the overall code and each descriptor's limit
// (OK 2/DAY), or the error's gRPC status name. Used by tests/envoy_env_e2e.sh and
// tests/listener_tls_e2e.sh.
//
// Usage: node should_rate_limit.js HOST:PORT DOMAIN KEY VALUE [KEY VALUE...] (one descriptor of
//   those entries; answers within 5 s)
// Env: TLS_CA (PEM file): TLS, the server verified against it, with TLS_CERT and TLS_KEY (PEM
//   files) as the client's certificate when set. AGAIN_WHEN (a path): after the first answer,
//   waits (up to 20 s) until that file exists, then calls again on the same channel (the same
//   connection) and prints the second answer too. TRACEPARENT (and TRACESTATE): sent as the
//   call's metadata, as Envoy sends its trace context.

'use strict';

const fs = require('fs');
const {grpc, loadProtos} = require('./testing');

const [target, domain, ...pairs] = process.argv.slice(2);
if (pairs.length < 2 || pairs.length % 2 !== 0) {
  console.error('usage: node should_rate_limit.js HOST:PORT DOMAIN KEY VALUE [KEY VALUE...]');
  process.exit(2);
}
const entries = [];
for (let i = 0; i < pairs.length; i += 2) entries.push({key: pairs[i], value: pairs[i + 1]});
const read = (name) => (process.env[name] ? fs.readFileSync(process.env[name]) : null);
const credentials = process.env.TLS_CA
  ? grpc.credentials.createSsl(read('TLS_CA'), read('TLS_KEY'), read('TLS_CERT'))
  : grpc.credentials.createInsecure();
const loaded = loadProtos(['envoy/service/ratelimit/v3/rls.proto'],
                          {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true});
const rls = new loaded.envoy.service.ratelimit.v3.RateLimitService(target, credentials);
const request = {domain, descriptors: [{entries}], hits_addend: 1};

const metadata = new grpc.Metadata();
if (process.env.TRACEPARENT) metadata.set('traceparent', process.env.TRACEPARENT);
if (process.env.TRACESTATE) metadata.set('tracestate', process.env.TRACESTATE);

function call(then) {
  rls.ShouldRateLimit(request, metadata, {deadline: Date.now() + 5000}, (error, response) => {
    if (error) {
      console.log(grpc.status[error.code]);
    } else {
      const limits = response.statuses.map(
          (s) => s.current_limit ? `${s.current_limit.requests_per_unit}/${s.current_limit.unit}` : '-');
      console.log(`${response.overall_code} ${limits.join(' ')}`);
    }
    then();
  });
}

function waitFor(path, deadline, then) {
  if (fs.existsSync(path) || Date.now() > deadline) return then();
  setTimeout(() => waitFor(path, deadline, then), 50);
}

call(() => {
  const again = process.env.AGAIN_WHEN;
  if (!again) return rls.close();
  waitFor(again, Date.now() + 20000, () => call(() => rls.close()));
});
