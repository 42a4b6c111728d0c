// The soak's load and monitoring driver (bench/soak.sh starts it; see the header there).
//
//   node driver.js CONFIG.json
//
// Sends a rate-limited, open-loop mix of requests over every frontend of the `sluice serve`
// instances named in CONFIG (POST /v1/check, POST /json, gRPC ShouldRateLimit, forward-auth
// /v1/auth, the reverse proxy), on hot keys with exact limits and on many cooler keys; during the
// flood periods it adds a stream of unique keys on the memory-store instance. Alongside the load
// it reloads the rules (valid, invalid, in-place non-atomic writes, POST /v1/reload, SIGHUP),
// resets keys through the admin API, and samples every instance's RSS and /readyz once a second.
//
// Writes into CONFIG.out:
//   requests.tsv  one line per request: send_ms recv_ms instance frontend domain key value
//                 outcome status flag   (times: Date.now(), the clock Redis's TIME reads)
//                 outcome: allow | deny | unavail (the failure policy's 503/UNAVAILABLE) |
//                 refund (proxy: the upstream's 5xx or a timeout, refunded) | error (any other
//                 answer) | noanswer (no answer within 10 s, or the connection failed)
//   events.tsv    start_ms end_ms what detail   (reloads, resets, floods, crashes)
//   rss.tsv       t_ms instance rss_kb
//   ready.tsv     t_ms instance http_status
// Every loop is bounded by CONFIG.seconds; the process exits by itself (at the latest 15 s after).

'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const grpc = require(path.join(cfg.grpcModules, '@grpc/grpc-js'));
const protoLoader = require(path.join(cfg.grpcModules, '@grpc/proto-loader'));

const out = (name) => fs.createWriteStream(path.join(cfg.out, name));
const requestsLog = out('requests.tsv');
const eventsLog = out('events.tsv');
const rssLog = out('rss.tsv');
const readyLog = out('ready.tsv');
const event = (start, end, what, detail = '') => eventsLog.write(`${start}\t${end}\t${what}\t${detail}\n`);

const t0 = Date.now();
const endAt = t0 + cfg.seconds * 1000;
const clientTimeoutMs = 10000;
// Hard stop: whatever is still in flight is logged as unanswered by its own timeout first.
setTimeout(() => finish(), cfg.seconds * 1000 + clientTimeoutMs + 3000).unref();

// ---------------------------------------------------------------- clients
const definition = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], {
  includeDirs: [cfg.protoDir].concat(fs.existsSync('/usr/include/google/protobuf/duration.proto') ? ['/usr/include'] : []),
  keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const RLS = grpc.loadPackageDefinition(definition).envoy.service.ratelimit.v3.RateLimitService;
const instances = cfg.instances.map((i) => ({
  ...i,
  agent: new http.Agent({keepAlive: true, maxSockets: 32}),
  rls: i.grpc ? new RLS(i.grpc, grpc.credentials.createInsecure()) : null,
}));
const redisInstances = instances.filter((i) => i.backend === 'redis');
const memoryInstances = instances.filter((i) => i.backend === 'memory');

let inFlight = 0;
let skipped = 0;  // not sent because maxInFlight requests were already waiting (load shedding)
let issued = 0;  // requests sent: each gets exactly one line in requests.tsv (analyze.js checks)

function logRequest(r, outcome, status, flag = '') {
  requestsLog.write(`${r.send}\t${Date.now()}\t${r.inst.name}\t${r.fe}\t${r.domain}\t${r.key}\t${r.value}\t${outcome}\t${status}\t${flag}\n`);
}

// An HTTP request; calls done(status, headers, body) or done(0, null, error text).
function httpCall(inst, method, target, headers, body, done) {
  const [host, port] = inst.data.split(':');
  let finished = false;
  const end = (...a) => { if (!finished) { finished = true; done(...a); } };
  const req = http.request({host, port, method, path: target, headers, agent: inst.agent}, (res) => {
    const chunks = [];
    res.on('data', (c) => chunks.push(c));
    res.on('end', () => end(res.statusCode, res.headers, Buffer.concat(chunks).toString()));
    res.on('error', (e) => end(0, null, String(e)));
  });
  req.setTimeout(clientTimeoutMs, () => { req.destroy(new Error('timeout')); });
  req.on('error', (e) => end(0, null, String(e)));
  req.end(body);
}

// The x-ratelimit-status of a /json answer's responseHeadersToAdd ('' if none, or not JSON).
function jsonFlag(body) {
  try {
    const h = (JSON.parse(body).responseHeadersToAdd || []).find((x) => x.key === 'x-ratelimit-status');
    return h ? h.value : '';
  } catch (e) {
    return '';
  }
}

function classifyHttp(r, status, headers, body) {
  if (status === 0) return logRequest(r, 'noanswer', 0, body.replace(/\s+/g, '_').slice(0, 60));
  // A failure policy's answer says so in X-RateLimit-Status; /json, as envoyproxy/ratelimit's,
  // carries it in the body's responseHeadersToAdd instead.
  const flag = headers['x-ratelimit-status'] || (r.fe === 'json' ? jsonFlag(body) : '');
  if (status === 200) return logRequest(r, 'allow', status, flag);
  if (status === 429) return logRequest(r, 'deny', status, flag);
  if (status === 503 && /unavailable/i.test(body)) return logRequest(r, 'unavail', status, flag);
  if (r.fe === 'proxy' && status === 500 && body === 'status 500') return logRequest(r, 'refund', status, flag);
  if (r.fe === 'proxy' && status === 504) return logRequest(r, 'refund', status, flag);
  return logRequest(r, 'error', status, body.replace(/\s+/g, '_').slice(0, 60));
}

const checkBody = (domain, key, value) =>
  JSON.stringify({domain, descriptors: [{entries: [{key, value}]}]});

// One request of frontend `fe` on (domain, key, value) at `inst`.
function send(inst, fe, domain, key, value) {
  const r = {inst, fe, domain, key, value, send: Date.now()};
  inFlight++;
  issued++;
  const done = (...a) => { inFlight--; classifyHttp(r, ...a); };
  const json = {'content-type': 'application/json'};
  if (fe === 'check') return httpCall(inst, 'POST', '/v1/check', json, checkBody(domain, key, value), done);
  if (fe === 'json') return httpCall(inst, 'POST', '/json', json, checkBody(domain, key, value), done);
  // forward-auth and proxy: the `exact` domain's http routes turn X-Hot / X-Slog / X-User into
  // the descriptor (one header, one descriptor).
  const header = {hot: 'X-Hot', slog: 'X-Slog', user: 'X-User'}[key];
  if (fe === 'auth') {
    return httpCall(inst, 'GET', '/v1/auth', {'X-Original-URI': '/api/items', 'X-Original-Method': 'GET', [header]: value}, '', done);
  }
  if (fe === 'proxy') {
    // The upstream answers 200 most of the time, sometimes 500 (refunded) and sometimes stalls
    // past http.upstream_timeout (504, refunded).
    const x = Math.random();
    const target = x < 0.8 ? '/status/200' : x < 0.9 ? '/status/500' : `/slow?ms=${cfg.stallMs}`;
    return httpCall(inst, 'GET', target, {[header]: value}, '', done);
  }
  // gRPC
  inst.rls.ShouldRateLimit({domain, descriptors: [{entries: [{key, value}]}]},
                           {deadline: Date.now() + clientTimeoutMs}, (error, response) => {
    inFlight--;
    if (error) {
      const name = grpc.status[error.code];
      if (name === 'UNAVAILABLE' && /backend/i.test(error.details || '')) return logRequest(r, 'unavail', name);
      if (name === 'UNAVAILABLE' || name === 'DEADLINE_EXCEEDED') return logRequest(r, 'noanswer', name, (error.details || '').replace(/\s+/g, '_').slice(0, 60));
      return logRequest(r, 'error', name, (error.details || '').replace(/\s+/g, '_').slice(0, 60));
    }
    // A failure policy's answer says so in a header to add, as over HTTP.
    const status = (response.response_headers_to_add || []).find((h) => h.key === 'x-ratelimit-status');
    if (response.overall_code === 'OK') return logRequest(r, 'allow', 'OK', status ? status.value : '');
    if (response.overall_code === 'OVER_LIMIT') return logRequest(r, 'deny', 'OVER_LIMIT');
    return logRequest(r, 'error', response.overall_code);
  });
}

// ---------------------------------------------------------------- the mix
const pick = (a) => a[Math.floor(Math.random() * a.length)];
const hot = Array.from({length: cfg.hotKeys}, (_, i) => `hot${i}`);
const slog = Array.from({length: cfg.slogKeys}, (_, i) => `s${i}`);
const hot2 = hot.slice(0, 2);  // the keys of the less loaded domains, so that they reach their limits too
const users = Array.from({length: cfg.userKeys}, (_, i) => `u${i}`);
const allFrontends = ['check', 'json', 'grpc', 'auth', 'proxy'];
const rpcFrontends = ['check', 'json', 'grpc'];
// [weight, function sending one request]
const mix = [
  [40, () => send(pick(redisInstances), pick(allFrontends), 'exact', 'hot', pick(hot))],
  [10, () => send(pick(redisInstances), pick(allFrontends), 'exact', 'slog', pick(slog))],
  [20, () => send(pick(redisInstances), pick(allFrontends), 'exact', 'user', pick(users))],
  [8, () => send(pick(redisInstances), pick(rpcFrontends), 'openx', 'hot', pick(hot2))],
  [4, () => send(pick(redisInstances), pick(rpcFrontends), 'localx', 'hot', pick(hot2))],
  [2, () => send(pick(redisInstances), 'check', 'churn', 'c', 'x')],
  [20, () => send(pick(memoryInstances), pick(rpcFrontends), 'mem', 'hot', pick(hot2))],
  [6, () => send(pick(memoryInstances), pick(rpcFrontends), 'mem', 'slog', pick(slog))],
];
const totalWeight = mix.reduce((s, [w]) => s + w, 0);
function oneOfMix() {
  let x = Math.random() * totalWeight;
  for (const [w, f] of mix) { if ((x -= w) < 0) return f(); }
  return mix[0][1]();
}

let floodSeq = 0;
const inFlood = (s) => cfg.floods.some(([a, b]) => s >= a && s < b);
let sent = 0;
let floodSent = 0;
const tick = setInterval(() => {
  const now = Date.now();
  if (now >= endAt) { clearInterval(tick); return; }
  const elapsed = (now - t0) / 1000;
  for (let due = Math.floor(elapsed * cfg.rps) - sent; due > 0; due--, sent++) {
    if (inFlight >= cfg.maxInFlight) { skipped++; continue; }
    oneOfMix();
  }
  if (inFlood(elapsed)) {
    if (floodSent === 0 || !inFlood(elapsed - 0.05)) floodSent = Math.floor(elapsed * cfg.floodRps);
    for (let due = Math.floor(elapsed * cfg.floodRps) - floodSent; due > 0; due--, floodSent++) {
      if (inFlight >= cfg.maxInFlight) { skipped++; continue; }
      send(pick(memoryInstances), 'check', 'flood', 'f', `f${process.pid}-${floodSeq++}`);
    }
  }
}, 10);
for (const [a, b] of cfg.floods) event(t0 + a * 1000, t0 + b * 1000, 'flood', `${cfg.floodRps}/s unique keys`);

// ---------------------------------------------------------------- reloads
const rulesDir = cfg.rulesDir;
const churnFile = path.join(rulesDir, 'churn.yaml');
const exactFile = path.join(rulesDir, 'exact.yaml');
const exactText = fs.readFileSync(exactFile, 'utf8');
const churnText = (n) => `# Rewritten by the soak's reloads (${n}).\ndomain: churn\ndescriptors:\n  - key: c\n    rate_limit: {requests: ${1000 + n}, window: 1s}\n`;
function atomicWrite(file, text) {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, file);
}
function inPlaceWrite(file, text, gapMs) {  // truncate, half, a pause, the rest: not atomic
  const fd = fs.openSync(file, 'w');
  const half = Math.floor(text.length / 2);
  fs.writeSync(fd, text.slice(0, half));
  setTimeout(() => { fs.writeSync(fd, text.slice(half)); fs.closeSync(fd); }, gapMs);
}
let reloadN = 0;
const reloadCounts = {};
const count = (k) => { reloadCounts[k] = (reloadCounts[k] || 0) + 1; };
function adminCall(inst, method, target, done) {
  const [host, port] = inst.admin.split(':');
  const req = http.request({host, port, method, path: target}, (res) => {
    let body = '';
    res.on('data', (c) => (body += c));
    res.on('end', () => done(res.statusCode, body));
  });
  req.setTimeout(5000, () => req.destroy(new Error('timeout')));
  req.on('error', () => done(0, ''));
  req.end();
}
function reloadOnce() {
  const n = ++reloadN;
  const start = Date.now();
  let kind;
  if (n % 10 === 0) {
    kind = 'invalid';  // an unknown key: the whole reload is refused, the old config kept
    atomicWrite(churnFile, churnText(n).replace('window:', 'windw:'));
  } else if (n % 10 <= 3) {
    kind = 'inplace';
    inPlaceWrite(churnFile, churnText(n), 5 + Math.floor(Math.random() * 40));
  } else if (n % 10 === 5) {
    kind = 'exact-same';  // the exact limits' own file, rewritten unchanged: their state stays
    atomicWrite(exactFile, exactText);
  } else {
    kind = 'atomic';
    atomicWrite(churnFile, churnText(n));
  }
  count(kind);
  let how = 'inotify';
  if (n % 4 === 0) {
    how = 'post';
    const inst = pick(instances);
    setTimeout(() => adminCall(inst, 'POST', '/v1/reload', (status) => {
      count(`post_${status}`);
      event(start, Date.now(), 'reload', `${kind} post ${inst.name} ${status}`);
    }), 60);
    return;
  }
  if (n % 9 === 0) {
    how = 'sighup';
    const inst = pick(instances);
    try { process.kill(inst.pid, 'SIGHUP'); } catch (e) { /* a dead instance is found by the monitor */ }
  }
  event(start, Date.now(), 'reload', `${kind} ${how}`);
}
const reloadTimer = setInterval(() => {
  if (Date.now() >= endAt - 3000) { clearInterval(reloadTimer); return; }
  reloadOnce();
}, cfg.reloadEveryMs);

// ---------------------------------------------------------------- admin resets
const resetTimer = setInterval(() => {
  if (Date.now() >= endAt - 1000) { clearInterval(resetTimer); return; }
  const inst = pick(redisInstances);
  const user = pick(users);
  const start = Date.now();
  adminCall(inst, 'DELETE', `/v1/limits?domain=exact&descriptors=user=${user}`, (status, body) => {
    event(start, Date.now(), 'reset', `exact user ${user} ${inst.name} ${status} ${body.trim()}`);
  });
}, cfg.resetEveryMs);

// ---------------------------------------------------------------- monitoring
const dead = new Set();
const monitor = setInterval(() => {
  const now = Date.now();
  if (now >= endAt) { clearInterval(monitor); return; }
  for (const inst of instances) {
    let rss = null;
    try {
      const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${inst.pid}/status`, 'utf8'));
      if (m) rss = Number(m[1]);
    } catch (e) { /* gone */ }
    if (rss === null) {
      if (!dead.has(inst.name)) { dead.add(inst.name); event(now, now, 'crash', `${inst.name} pid ${inst.pid} is gone`); }
      continue;
    }
    rssLog.write(`${now}\t${inst.name}\t${rss}\n`);
    adminCall(inst, 'GET', '/readyz', (status) => readyLog.write(`${now}\t${inst.name}\t${status}\n`));
  }
}, 1000);

// ---------------------------------------------------------------- the end
let finished = false;
function finish() {
  if (finished) return;
  finished = true;
  const summary = {issued, sent, floodSent, skipped, inFlight, reloads: reloadN, reloadCounts};
  fs.writeFileSync(path.join(cfg.out, 'driver.json'), JSON.stringify(summary, null, 1) + '\n');
  let open = 4;
  const closed = () => { if (--open === 0) process.exit(0); };
  for (const s of [requestsLog, eventsLog, rssLog, readyLog]) s.end(closed);
}
// Once the load stops: the last configuration is a valid one; then wait for what is in flight.
setTimeout(() => {
  atomicWrite(churnFile, churnText(999999));
  const waitDone = setInterval(() => {
    if (inFlight === 0) { clearInterval(waitDone); setTimeout(finish, 200); }
  }, 100);
}, Math.max(0, endAt - Date.now()) + 50);
