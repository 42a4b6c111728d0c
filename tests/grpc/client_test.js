// End-to-end test of sluice's gRPC port with an independent client: @grpc/grpc-js (a pure
// JavaScript gRPC stack, no code shared with gRPC C++) and @grpc/proto-loader reading sluice's own
// .proto files. Run by tests/grpc_e2e.sh against `sluice serve` with tests/grpc/rules/edge.yaml.
//
// Usage: node client_test.js HOST:PORT
// Prints one line per check and exits 1 if any failed (or if the whole run takes over 30 s).

'use strict';

const net = require('net');
const {grpc, loadProtos, checker} = require('./testing');

const target = process.argv[2];
if (!target) {
  console.error('usage: node client_test.js HOST:PORT');
  process.exit(2);
}
const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];

setTimeout(() => {
  console.error('FAIL the run took longer than 30 s');
  process.exit(1);
}, 30000).unref();

const loaded = loadProtos(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'],
                          {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true});
const credentials = grpc.credentials.createInsecure();
const rls = new loaded.envoy.service.ratelimit.v3.RateLimitService(target, credentials);
const health = new loaded.grpc.health.v1.Health(target, credentials);

const {check, summary: finish} = checker();

// A unary call as a promise of {error, response}; every call has a deadline.
function call(client, method, request, deadline = Date.now() + 5000) {
  return new Promise((resolve) => {
    client[method](request, {deadline}, (error, response) => resolve({error, response}));
  });
}

function descriptor(entries, extra = {}) {
  return {entries: Object.entries(entries).map(([key, value]) => ({key, value})), ...extra};
}

async function shouldRateLimit(domain, descriptors, extra = {}) {
  const {error, response} = await call(rls, 'ShouldRateLimit', {domain, descriptors, ...extra});
  if (error) return {code: grpc.status[error.code], message: error.details};
  return response;
}

// One status as [code, requests_per_unit, unit, name, limit_remaining] (nulls when no limit).
function summary(status) {
  const limit = status.current_limit;
  return [status.code, limit ? limit.requests_per_unit : null, limit ? limit.unit : null,
          limit ? limit.name : null, status.limit_remaining];
}

// Writes `bytes` on a fresh TCP connection to the gRPC port and waits (at most 2 s) for the
// server to close it or go quiet.
function sendRaw(bytes) {
  return new Promise((resolve) => {
    const socket = net.connect({host, port}, () => socket.write(bytes));
    const done = () => {
      socket.destroy();
      resolve();
    };
    socket.on('data', () => {});
    socket.on('error', done);
    socket.on('close', done);
    setTimeout(done, 2000);
  });
}

async function main() {
  // --- health (grpc.health.v1)
  for (const service of ['', 'ratelimit']) {
    const {error, response} = await call(health, 'Check', {service});
    check(`health "${service}" is SERVING`, 'SERVING', error ? error.details : response.status);
  }
  {
    const {error} = await call(health, 'Check', {service: 'no-such-service'});
    check('health of an unknown service is NOT_FOUND', 'NOT_FOUND', error && grpc.status[error.code]);
  }

  // --- allow, then deny (per-user: token bucket, 2 per day)
  let r = await shouldRateLimit('edge', [descriptor({user: 'u1'})]);
  check('allow: overall OK', 'OK', r.overall_code);
  check('allow: status', [['OK', 2, 'DAY', 'per-user', 1]], (r.statuses || []).map(summary));
  check('allow: duration_until_reset present', true, Boolean(r.statuses && r.statuses[0].duration_until_reset));
  r = await shouldRateLimit('edge', [descriptor({user: 'u1'})]);
  check('second call allowed with 0 left', [['OK', 2, 'DAY', 'per-user', 0]], (r.statuses || []).map(summary));
  r = await shouldRateLimit('edge', [descriptor({user: 'u1'})]);
  check('deny: overall OVER_LIMIT', 'OVER_LIMIT', r.overall_code);
  check('deny: status OVER_LIMIT', [['OVER_LIMIT', 2, 'DAY', 'per-user', 0]], (r.statuses || []).map(summary));
  r = await shouldRateLimit('edge', [descriptor({user: 'u2'})]);
  check('another user is independent', 'OK', r.overall_code);

  // --- several descriptors, answered in request order
  r = await shouldRateLimit('edge', [descriptor({path: '/a'}), descriptor({nothing: 'matches'}),
                                     descriptor({user: 'u3'})]);
  check('multiple descriptors', [['OK', 10, 'DAY', '', 9], ['OK', null, null, null, 0],
                                 ['OK', 2, 'DAY', 'per-user', 1]], (r.statuses || []).map(summary));

  // --- a limit override replaces the configured limit (1 per YEAR: no window edge in the test)
  const override = descriptor({path: '/override'}, {limit: {requests_per_unit: 1, unit: 'YEAR'}});
  r = await shouldRateLimit('edge', [override]);
  check('override applied', [['OK', 1, 'YEAR', '', 0]], (r.statuses || []).map(summary));
  r = await shouldRateLimit('edge', [override]);
  check('override exhausted', 'OVER_LIMIT', r.overall_code);

  // --- hits_addend: request level, descriptor level (0 = look without consuming)
  r = await shouldRateLimit('edge', [descriptor({path: '/hits'})], {hits_addend: 4});
  check('request hits_addend 4', 6, r.statuses && r.statuses[0].limit_remaining);
  for (let i = 0; i < 2; i++) {
    r = await shouldRateLimit('edge', [descriptor({path: '/hits'}, {hits_addend: {value: 0}})],
                              {hits_addend: 4});
    check(`descriptor hits_addend 0 peeks (${i + 1})`, 6, r.statuses && r.statuses[0].limit_remaining);
  }
  r = await shouldRateLimit('edge', [descriptor({path: '/hits'}, {hits_addend: {value: 2}})],
                            {hits_addend: 4});
  check('descriptor hits_addend wins over the request', 4, r.statuses && r.statuses[0].limit_remaining);
  r = await shouldRateLimit('edge', [descriptor({path: '/hits'})], {hits_addend: 5});
  check('hits_addend above what is left is denied', 'OVER_LIMIT', r.overall_code);

  // --- unknown domain: OK without limits, as envoyproxy/ratelimit
  r = await shouldRateLimit('no-such-domain', [descriptor({user: 'u1'})]);
  check('unknown domain is OK', 'OK', r.overall_code);
  check('unknown domain: no limit', [['OK', null, null, null, 0]], (r.statuses || []).map(summary));

  // --- errors
  r = await shouldRateLimit('', [descriptor({user: 'u1'})]);
  check('empty domain', {code: 'INVALID_ARGUMENT', message: 'rate limit domain must not be empty'}, r);
  r = await shouldRateLimit('edge', []);
  check('no descriptors', 'INVALID_ARGUMENT', r.code);

  // --- a deadline that has already passed
  {
    const {error} = await call(rls, 'ShouldRateLimit', {domain: 'edge', descriptors: [descriptor({user: 'u9'})]},
                               Date.now() - 1000);
    check('deadline already passed', 'DEADLINE_EXCEEDED', error && grpc.status[error.code]);
  }

  // --- garbage on the gRPC port: the server drops those connections and carries on
  await sendRaw(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
  await sendRaw(Buffer.from(Array.from({length: 4096}, (_, i) => (i * 131 + 7) & 0xff)));
  // A valid HTTP/2 preface followed by a frame header announcing a huge frame of unknown type.
  await sendRaw(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
                               Buffer.from([0xff, 0xff, 0xff, 0xee, 0x00, 0x7f, 0xff, 0xff, 0xff]),
                               Buffer.alloc(64, 0xab)]));
  r = await shouldRateLimit('edge', [descriptor({user: 'u4'})]);
  check('after garbage: still answering', [['OK', 2, 'DAY', 'per-user', 1]], (r.statuses || []).map(summary));
  {
    const {error, response} = await call(health, 'Check', {service: 'ratelimit'});
    check('after garbage: still healthy', 'SERVING', error ? error.details : response.status);
  }

  rls.close();
  health.close();
  process.exit(finish() ? 0 : 1);
}

main().catch((e) => {
  console.error('FAIL', e);
  process.exit(1);
});
