// A fixed number of RLS v3 ShouldRateLimit calls, one at a time on one channel: the gRPC load of
// tests/perf_guard.sh, which counts the server's instructions per call with callgrind (so the
// load is a fixed sequence, never a duration, and nothing is in flight when counting starts or
// stops).
//
// Usage: node perf_drive.js HOST:PORT WARMUP REQUESTS ON_START ON_END
//   WARMUP calls, then the shell command ON_START (the guard turns instrumentation on), then
//   REQUESTS calls, then ON_END. Each call: domain "bench", one descriptor
//   generic_key=allow, key=k1 (bench/compare/bench.yaml: never denied). Prints one JSON line
//   {"requests": N, "status": {"OK": n}}; exits 1 on any error or an answer other than OK.

'use strict';

const {execSync} = require('child_process');
const {grpc, loadProtos} = require('./testing');

const [target, warmupArg, requestsArg, onStart, onEnd] = process.argv.slice(2);
if (!requestsArg) {
  console.error('usage: node perf_drive.js HOST:PORT WARMUP REQUESTS [ON_START [ON_END]]');
  process.exit(2);
}
const warmup = Number(warmupArg);
const requests = Number(requestsArg);

const loaded = loadProtos(['envoy/service/ratelimit/v3/rls.proto'],
                          {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true});
const rls = new loaded.envoy.service.ratelimit.v3.RateLimitService(
    target, grpc.credentials.createInsecure());
const request = {
  domain: 'bench',
  descriptors: [{entries: [{key: 'generic_key', value: 'allow'}, {key: 'key', value: 'k1'}]}],
  hits_addend: 1,
};

function call() {
  return new Promise((resolve) => {
    rls.ShouldRateLimit(request, {deadline: Date.now() + 30000},
                        (error, response) => resolve(error ? grpc.status[error.code] : response.overall_code));
  });
}

(async () => {
  const status = {};
  let bad = 0;
  for (let i = 0; i < warmup + requests; ++i) {
    if (i === warmup && onStart) execSync(onStart, {stdio: 'inherit'});
    // A pause before each call, so that the server is always waiting for it when it comes (as
    // tests/perf_drive.py does): the same path through its event loop every time.
    await new Promise((resolve) => setTimeout(resolve, 1));
    const code = await call();
    if (code !== 'OK') ++bad;
    if (i >= warmup) status[code] = (status[code] || 0) + 1;
  }
  if (onEnd) execSync(onEnd, {stdio: 'inherit'});
  rls.close();
  console.log(JSON.stringify({requests, status}));
  if (bad > 0) {
    console.error(`perf_drive.js: ${bad} calls did not answer OK`);
    process.exit(1);
  }
})();
