// End-to-end checks of envoyproxy/ratelimit behaviours that sluice matches (issue 19), over
// both of its RLS transports: gRPC ShouldRateLimit (@grpc/grpc-js) and HTTP POST /json. Run by
// tests/envoy_dropin_e2e.sh against `sluice serve` with tests/grpc/dropin/q.yaml, in memory and
// on Redis.
//
// Usage: node dropin_test.js GRPC_HOST:PORT HTTP_HOST:PORT quota|shadow
//   quota:  per-descriptor quota_mode, a descriptor with no entries, a named limit's JSON order
//   shadow: the server runs with the settings' shadow_mode and response_dynamic_metadata
// Prints one line per check and exits 1 if any failed (or if the run takes over 30 s).

'use strict';

const http = require('http');
const {grpc, loadProtos, checker} = require('./testing');

const [grpcTarget, httpTarget, mode] = process.argv.slice(2);
if (!grpcTarget || !httpTarget || !['quota', 'shadow'].includes(mode)) {
  console.error('usage: node dropin_test.js GRPC_HOST:PORT HTTP_HOST:PORT quota|shadow');
  process.exit(2);
}
setTimeout(() => {
  console.error('FAIL the run took longer than 30 s');
  process.exit(1);
}, 30000).unref();

const loaded = loadProtos(['envoy/service/ratelimit/v3/rls.proto'],
    {keepCase: false, longs: String, enums: String, defaults: false, oneofs: true});
const rls = new loaded.envoy.service.ratelimit.v3.RateLimitService(
    grpcTarget, grpc.credentials.createInsecure());
const {check, summary} = checker();

// One request over a transport; resolves to {overall, codes, remaining, raw} (raw: /json's body).
function viaGrpc(request) {
  return new Promise((resolve) => {
    rls.ShouldRateLimit(request, {deadline: Date.now() + 5000}, (error, response) => {
      if (error) return resolve({error: grpc.status[error.code]});
      const statuses = response.statuses || [];
      const md = response.dynamicMetadata && response.dynamicMetadata.fields;
      resolve({overall: response.overallCode, codes: statuses.map((s) => s.code),
               remaining: statuses.map((s) => s.limitRemaining || 0), raw: '',
               metadataDomain: md && md.domain ? md.domain.stringValue : null});
    });
  });
}
function viaJson(request) {
  const [host, port] = [httpTarget.slice(0, httpTarget.lastIndexOf(':')),
                        httpTarget.slice(httpTarget.lastIndexOf(':') + 1)];
  const body = JSON.stringify(request);
  return new Promise((resolve) => {
    const req = http.request({host, port, method: 'POST', path: '/json',
                              headers: {'content-type': 'application/json'}}, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const raw = Buffer.concat(chunks).toString();
        let parsed = {};
        try { parsed = JSON.parse(raw); } catch (e) { return resolve({error: `${res.statusCode} ${raw}`}); }
        const statuses = parsed.statuses || [];
        resolve({overall: parsed.overallCode, http: res.statusCode, codes: statuses.map((s) => s.code),
                 remaining: statuses.map((s) => s.limitRemaining || 0), raw,
                 metadataDomain: parsed.dynamicMetadata ? parsed.dynamicMetadata.domain : null});
      });
    });
    req.setTimeout(5000, () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({error: String(e)}));
    req.end(body);
  });
}

const d = (key, value, extra = {}) => ({entries: [{key, value}], ...extra});
const peek = (key, value) => d(key, value, {hitsAddend: {value: 0}});
const request = (...descriptors) => ({domain: 'q', descriptors});

async function quota(send, name, t) {
  // Three of quota's 3 go with three of regular's 5.
  for (let i = 0; i < 3; i++) await send(request(d('regular', `r${t}`), d('quota', `a${t}`)));
  let r = await send(request(d('regular', `r${t}`), d('quota', `a${t}`)));
  check(`${name}: the only quota spent denies`, 'OVER_LIMIT', r.overall);
  check(`${name}: ...its status OVER_LIMIT, the other's OK`, ['OK', 'OVER_LIMIT'], r.codes);
  if (name === 'json') check('json: OVER_LIMIT is 429', 429, r.http);
  r = await send(request(peek('regular', `r${t}`)));
  check(`${name}: ...and the other gave back what it took`, [2], r.remaining);
  r = await send(request(d('quota', `a${t}`), d('quota2', `b${t}`)));
  check(`${name}: one quota of two spent is OK`, 'OK', r.overall);
  check(`${name}: ...the spent one still says OVER_LIMIT`, ['OVER_LIMIT', 'OK'], r.codes);
  r = await send(request(d('regular', `x${t}`), d('quota', `a${t}`), d('quota2', `b${t}`)));
  check(`${name}: a regular descriptor under its limit and a quota left is OK`, 'OK', r.overall);
  // A descriptor with no entries: OK, no limit (upstream).
  r = await send(request({entries: []}, d('regular', `e${t}`)));
  check(`${name}: a descriptor with no entries is OK without a limit`, ['OK', 'OK'], r.codes);
  check(`${name}: no dynamic metadata unless asked for`, null, r.metadataDomain);
  check(`${name}: ...and the other is decided`, [0, 4], r.remaining);
  if (name === 'json') {
    check('json: {"code":"OK"} for the descriptor with no entries', true,
          r.raw.includes('"statuses":[{"code":"OK"},'));
    check('json: a named limit is written name first (declaration order)', true,
          r.raw.includes('"currentLimit":{"name":"per-regular","requestsPerUnit":5,"unit":"DAY"}'));
  }
}

async function shadow(send, name, t) {
  for (let i = 0; i < 5; i++) await send(request(d('regular', `s${t}`)));
  const r = await send(request(d('regular', `s${t}`), d('quota2', `c${t}`)));
  check(`${name}: global shadow mode admits`, 'OK', r.overall);
  check(`${name}: ...and the status keeps OVER_LIMIT`, ['OVER_LIMIT', 'OK'], r.codes);
  if (name === 'json') check('json: admitted is 200', 200, r.http);
  check(`${name}: response_dynamic_metadata: the answer names its domain`, 'q', r.metadataDomain);
}

async function main() {
  const t = Date.now().toString(36);
  const run = mode === 'quota' ? quota : shadow;
  await run(viaGrpc, 'grpc', `g${t}`);
  await run(viaJson, 'json', `j${t}`);
  rls.close();
  process.exit(summary() ? 0 : 1);
}

main().catch((e) => {
  console.error('FAIL', e);
  process.exit(1);
});
