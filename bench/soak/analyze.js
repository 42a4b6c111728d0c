// The soak's analysis (bench/soak.sh runs it): reads what driver.js and soak.sh recorded in each
// phase's directory and writes OUT/report.md, plus the series that plots.gp draws (PHASE/*.dat).
//
//   node analyze.js OUT PHASE_DIR...
//
// Exit status 1 when any check failed: a crash (an instance gone, or a non-zero exit status on
// SIGTERM), an unanswered request, an answer that is none of the expected ones, an admission
// beyond an exact limit in a window that is not counted apart, a denial while the limit
// certainly had room, RSS growth beyond +50 % after warm-up, /readyz staying 200 through a Redis
// outage, or the instances ending on different configurations.
//
// Exactness without trusting any clock but the one Redis reads (Date.now() here is the same
// CLOCK_REALTIME): a request's decision happened somewhere in [send_ms, recv_ms + 1). A fixed
// window (length W, starting at multiples of W) is sure to hold an admission only when that whole
// interval lies in it; a violation is a window holding more sure admissions than the limit. A
// sliding log (L per W) is violated for sure when L + 1 admissions' intervals all lie within
// less than W. So a correct server can never be flagged, whatever the latencies.

'use strict';

const fs = require('fs');
const path = require('path');

const [outDir, ...phaseDirs] = process.argv.slice(2);
const failures = [];
const md = [];
const p = (s = '') => md.push(s);
const fmt = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : String(n));
const readTsv = (file) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8').split('\n').filter((l) => l).map((l) => l.split('\t')) : []);
const quantile = (sorted, q) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : 0);
const median = (a) => quantile([...a].sort((x, y) => x - y), 0.5);
const GRACE_MS = 5000;  // after an outage: reconnect backoff (≤ 1 s) and the breaker's second

p('# sluice soak report');
p();

for (const dir of phaseDirs) {
  const phase = path.basename(dir);
  const fail = (what) => failures.push(`${phase}: ${what}`);
  const requests = readTsv(path.join(dir, 'requests.tsv')).map((f) => ({
    send: +f[0], recv: +f[1], inst: f[2], fe: f[3], domain: f[4], key: f[5], value: f[6], outcome: f[7], status: f[8], flag: f[9] || '',
  }));
  const events = readTsv(path.join(dir, 'events.tsv')).map((f) => ({start: +f[0], end: +f[1], what: f[2], detail: f[3] || ''}));
  const faults = readTsv(path.join(dir, 'faults.tsv')).map((f) => ({start: +f[0], end: +f[1], what: f[2], detail: f[3] || ''}));
  const rss = readTsv(path.join(dir, 'rss.tsv')).map((f) => ({t: +f[0], inst: f[1], kb: +f[2]}));
  const ready = readTsv(path.join(dir, 'ready.tsv')).map((f) => ({t: +f[0], inst: f[1], status: +f[2]}));
  const limits = JSON.parse(fs.readFileSync(path.join(dir, 'limits.json'), 'utf8'));
  const driver = fs.existsSync(path.join(dir, 'driver.json')) ? JSON.parse(fs.readFileSync(path.join(dir, 'driver.json'), 'utf8')) : null;
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'driver-config.json'), 'utf8'));
  const exits = readTsv(path.join(dir, 'exits.tsv')).slice(1);
  const rulesFinal = readTsv(path.join(dir, 'rules-final.tsv')).slice(1);
  const t0 = requests.length ? Math.min(...requests.slice(0, 1000).map((r) => r.send)) : 0;
  const sec = (t) => ((t - t0) / 1000).toFixed(1);

  p(`## Phase \`${phase}\`: ${cfg.seconds} s, ${{cluster: 'a 3-master Redis Cluster (a replica each)', sentinel: 'a master and two replicas over mutual TLS, found through three redis-sentinels over TLS'}[phase] || 'one Redis'}`);
  p();
  if (!driver) fail('the load driver did not finish (no driver.json)');

  // ------------------------------------------------------------ requests by frontend and answer
  const byFe = {};
  const outcomes = ['allow', 'deny', 'unavail', 'refund', 'error', 'noanswer'];
  for (const r of requests) {
    const k = r.domain === 'flood' ? 'check (flood)' : r.fe;
    byFe[k] = byFe[k] || Object.fromEntries(outcomes.map((o) => [o, 0]));
    byFe[k][r.outcome]++;
  }
  const total = Object.fromEntries(outcomes.map((o) => [o, requests.filter((r) => r.outcome === o).length]));
  p(`Requests sent: **${fmt(requests.length)}** (${fmt(cfg.rps)}/s of mixed load${cfg.floods.length ? `, plus ${cfg.floodRps}/s of unique keys during the floods` : ''}); ` +
    `not sent because ${cfg.maxInFlight} were already waiting: ${fmt(driver ? driver.skipped : 0)}.`);
  p();
  p('| frontend | allowed | denied (429) | backend unavailable (503) | proxy: upstream 500/504, refunded | other answer | unanswered |');
  p('|---|---:|---:|---:|---:|---:|---:|');
  for (const [fe, c] of Object.entries(byFe).sort()) p(`| ${fe} | ${outcomes.map((o) => fmt(c[o])).join(' | ')} |`);
  p(`| **all** | ${outcomes.map((o) => `**${fmt(total[o])}**`).join(' | ')} |`);
  p();
  const statusCounts = {};
  for (const r of requests) statusCounts[`${r.fe === 'grpc' ? 'grpc ' : 'http '}${r.status}`] = (statusCounts[`${r.fe === 'grpc' ? 'grpc ' : 'http '}${r.status}`] || 0) + 1;
  p(`Answers by status: ${Object.entries(statusCounts).sort().map(([s, n]) => `${s}: ${fmt(n)}`).join(', ')}.`);
  p();
  // Every request sent has its one line: the driver's own count must match.
  if (driver && driver.issued !== undefined && driver.issued !== requests.length) {
    fail(`the driver sent ${driver.issued} requests but recorded ${requests.length}`);
  }
  if (total.noanswer) {
    fail(`${total.noanswer} requests unanswered`);
    const ex = requests.filter((r) => r.outcome === 'noanswer').slice(0, 5);
    p(`**Unanswered: ${total.noanswer}.** First ones: ${ex.map((r) => `${r.fe} ${r.domain} ${r.key}=${r.value} at ${sec(r.send)} s on ${r.inst} (${r.status} ${r.flag})`).join('; ')}.`);
    p();
  }
  if (total.error) {
    fail(`${total.error} unexpected answers`);
    const kinds = {};
    for (const r of requests.filter((x) => x.outcome === 'error')) kinds[`${r.fe} ${r.status} ${r.flag}`] = (kinds[`${r.fe} ${r.status} ${r.flag}`] || 0) + 1;
    p(`**Unexpected answers: ${total.error}**: ${Object.entries(kinds).map(([k, n]) => `${k} ×${n}`).join('; ')}.`);
    p();
  }

  // ------------------------------------------------------------ faults and outages
  const all = [...faults, ...events.filter((e) => e.what === 'crash' || e.what === 'flood')].sort((a, b) => a.start - b.start);
  p('Faults (times from the start of the load):');
  p();
  for (const f of all) p(`- ${sec(f.start)}–${sec(f.end)} s: ${f.what}: ${f.detail}`);
  const reloads = events.filter((e) => e.what === 'reload');
  const resets = events.filter((e) => e.what === 'reset');
  p(`- reloads: ${fmt(reloads.length)} (${Object.entries(driver ? driver.reloadCounts : {}).map(([k, n]) => `${k} ${n}`).join(', ')}); ` +
    `admin resets: ${fmt(resets.length)} (${resets.filter((e) => / 200 /.test(e.detail)).length} answered 200)`);
  p();
  // Periods when Redis could not decide (each fault, and a grace after it): windows of open/local
  // domains overlapping them are counted apart.
  const outageFaults = faults.filter((f) => ['redis_kill', 'redis_stop', 'failover', 'sentinel_kill', 'sentinel_failover'].includes(f.what));
  const outages = outageFaults.map((f) => ({start: f.start, end: f.end + GRACE_MS, what: f.what}));
  // A Sentinel failover may lose the writes the old master had not yet replicated (and, until
  // the instances follow, what they still write there): docs/redis.md. Windows of every domain
  // overlapping one (+ the grace) are counted apart.
  const lossy = faults.filter((f) => f.what === 'sentinel_kill' || f.what === 'sentinel_failover')
    .map((f) => ({start: f.start, end: f.end + GRACE_MS}));
  const kills = faults.filter((f) => f.what === 'redis_kill').map((f) => ({start: f.start, end: f.end + GRACE_MS}));
  const overlaps = (a0, a1, list) => list.some((o) => a0 < o.end && a1 > o.start);
  // The failure policies' answers, by frontend: an admission they made counts apart only when
  // its answer says so, so each frontend that sends open/local domains must be seen saying it
  // (a frontend whose flag the driver cannot read would make those admissions look exact).
  if (outages.length) {
    const flagged = {};
    for (const r of requests) if (r.flag === 'degraded' || r.flag === 'local') flagged[r.fe] = (flagged[r.fe] || 0) + 1;
    const policyFes = [...new Set(requests.filter((r) => r.domain === 'openx' || r.domain === 'localx').map((r) => r.fe))].sort();
    p(`Failure-policy answers by frontend: ${policyFes.map((fe) => `${fe} ${fmt(flagged[fe] || 0)}`).join(', ')}.`);
    p();
    // (Checked where a frontend sent at least 20 such requests during the outages themselves.)
    const during = {};
    for (const r of requests) {
      if ((r.domain === 'openx' || r.domain === 'localx') && outageFaults.some((f) => r.send >= f.start && r.send <= f.end)) {
        during[r.fe] = (during[r.fe] || 0) + 1;
      }
    }
    for (const fe of policyFes) if (!flagged[fe] && (during[fe] || 0) >= 20) fail(`no failure-policy answer seen on ${fe} during the Redis outages (${during[fe]} requests of open/local domains sent during them)`);
  }

  // ------------------------------------------------------------ exactness
  const excusedBy = {};  // group -> [{start,end}] of degraded/local answers and resets
  const groupOf = (r, lim) => `${r.domain}|${r.key}|${r.value}${lim.scope === 'instance' ? `|${r.inst}` : ''}`;
  const limitOf = {};
  for (const l of limits) limitOf[`${l.domain}|${l.key}`] = l;
  const groups = {};
  for (const r of requests) {
    const lim = limitOf[`${r.domain}|${r.key}`];
    if (!lim) continue;
    const g = groupOf(r, lim);
    (groups[g] = groups[g] || {lim, reqs: []}).reqs.push(r);
    if (r.flag === 'degraded' || r.flag === 'local') (excusedBy[g] = excusedBy[g] || []).push({start: r.send, end: r.recv + 1});
  }
  for (const e of resets) {
    const m = / user (\S+) /.exec(e.detail);
    if (m) (excusedBy[`exact|user|${m[1]}`] = excusedBy[`exact|user|${m[1]}`] || []).push({start: e.start, end: e.end + 1});
  }
  const rows = [];
  const hotSeries = {};
  for (const [g, {lim, reqs}] of Object.entries(groups).sort()) {
    const adm = reqs.filter((r) => r.outcome === 'allow');
    const W = lim.window_ms;
    const policyOpen = lim.failure_mode === 'open' || lim.failure_mode === 'local';
    const excused = (a0, a1) => overlaps(a0, a1, excusedBy[g] || []) || (policyOpen && overlaps(a0, a1, outages)) ||
      (lim.scope !== 'instance' && overlaps(a0, a1, lossy));
    const row = rows.find((x) => x.lim === lim) || rows[rows.push({lim, keys: 0, admitted: 0, windows: 0, violations: 0, apart: 0, over: 0, examples: [], under: 0, underExamples: []}) - 1];
    row.keys++;
    row.admitted += adm.length;
    if (lim.algorithm === 'fixed_window') {
      const sure = new Map();
      const possible = new Map();
      const consumers = new Map();  // what may have consumed: admissions, refunds, unanswered, 503s during a kill
      const add = (m, w) => m.set(w, (m.get(w) || 0) + 1);
      for (const r of reqs) {
        const lo = Math.floor(r.send / W);
        const hi = Math.floor((r.recv + 1) / W);
        const mayConsume = r.outcome === 'allow' || r.outcome === 'refund' || r.outcome === 'noanswer' ||
            (r.outcome === 'unavail' && overlaps(r.send, r.recv + 1, kills));
        for (let w = lo; w <= hi; w++) {
          if (r.outcome === 'allow') add(possible, w);
          if (mayConsume) add(consumers, w);
        }
        if (r.outcome === 'allow' && lo === hi) add(sure, lo);
      }
      row.windows += possible.size;
      for (const [w, n] of sure) {
        if (n <= lim.limit) continue;
        if (excused(w * W, (w + 1) * W)) { row.apart++; continue; }
        row.violations++;
        row.over += n - lim.limit;
        if (row.examples.length < 3) row.examples.push(`${g.replace(/\|/g, ' ')} window ${sec(w * W)}–${sec((w + 1) * W)} s: ${n} sure admissions`);
      }
      // Denials under the limit: a denial surely in window w while everything that may have
      // consumed in w is still under the limit. 503s of the failure policy are not counted as
      // consuming (they said nothing was admitted), except around a kill -9, where a decision
      // may have been made and its answer lost.
      if (lim.failure_mode !== 'open' && lim.failure_mode !== 'local') {
        const seen = new Set();
        for (const r of reqs) {
          if (r.outcome !== 'deny') continue;
          const lo = Math.floor(r.send / W);
          if (lo !== Math.floor((r.recv + 1) / W) || seen.has(lo)) continue;
          if ((consumers.get(lo) || 0) >= lim.limit || excused(lo * W, (lo + 1) * W)) continue;
          seen.add(lo);
          row.under++;
          if (row.underExamples.length < 10) {
            const inWindow = reqs.filter((x) => Math.floor(x.send / W) <= lo && Math.floor((x.recv + 1) / W) >= lo);
            const c = {};
            for (const x of inWindow) c[x.outcome] = (c[x.outcome] || 0) + 1;
            row.underExamples.push(`${g.replace(/\|/g, ' ')} window ${sec(lo * W)}–${sec((lo + 1) * W)} s: denied at ${sec(r.send)} s with at most ${consumers.get(lo) || 0} of ${lim.limit} possibly consumed (requests in the window: ${Object.entries(c).map(([k, n]) => `${k} ${n}`).join(', ')})`);
          }
        }
      }
      if (g === 'exact|hot|hot0' || g === 'mem|hot|hot0|m') {
        hotSeries[g] = [...possible.keys()].sort((a, b) => a - b).map((w) => [(w * W - t0) / 1000, sure.get(w) || 0, possible.get(w), lim.limit]);
      }
    } else {  // sliding_log
      const a = adm.filter((r) => r.recv + 2 <= r.send + W).sort((x, y) => x.send - y.send);
      let skipUntil = -Infinity;
      row.windows += a.length;
      for (let i = 0; i < a.length; i++) {
        if (a[i].send < skipUntil) continue;
        let n = 0;
        for (let j = i; j < a.length && a[j].send < a[i].send + W; j++) if (a[j].recv + 2 <= a[i].send + W) n++;
        if (n <= lim.limit) continue;
        skipUntil = a[i].send + W;
        if (excused(a[i].send, a[i].send + W)) { row.apart++; continue; }
        row.violations++;
        row.over += n - lim.limit;
        if (row.examples.length < 3) row.examples.push(`${g.replace(/\|/g, ' ')}: ${n} admissions within ${sec(a[i].send)}–${sec(a[i].send + W)} s`);
      }
    }
  }
  p('### Exact limits');
  p();
  p('Admissions beyond the limit count only when certain (see analyze.js); windows of `open`/`local` domains overlapping a Redis outage (+5 s), windows holding a degraded or local answer, windows of a key reset through the admin API, and windows of Redis-backed domains overlapping a Sentinel failover (+5 s: the writes it may lose, docs/redis.md) are counted apart.');
  p();
  p('| domain (failure_mode) | descriptor | limit | keys | admitted | windows | over the limit | counted apart | denied under the limit |');
  p('|---|---|---|---:|---:|---:|---:|---:|---:|');
  for (const r of rows) {
    const l = r.lim;
    p(`| ${l.domain} (${l.failure_mode}${l.scope === 'instance' ? ', memory store, per instance' : ''}) | ${l.key} | ${l.algorithm} ${l.limit}/${l.window_ms / 1000}s | ${r.keys} | ${fmt(r.admitted)} | ${fmt(r.windows)} | ${r.violations ? `**${r.violations}** (+${r.over})` : 0} | ${r.apart} | ${r.under ? `**${r.under}**` : 0} |`);
    if (r.violations) fail(`${r.violations} windows over the limit in ${l.domain} ${l.key}`);
    if (r.under) fail(`${r.under} denials under the limit in ${l.domain} ${l.key}`);
  }
  p();
  for (const r of rows) {
    for (const e of r.examples) p(`- over the limit: ${e}`);
    for (const e of r.underExamples) p(`- denied under the limit: ${e}`);
  }
  p();

  // ------------------------------------------------------------ crashes, exits, readiness, reloads
  p('### Processes');
  p();
  const crashes = events.filter((e) => e.what === 'crash');
  for (const c of crashes) fail(`crash: ${c.detail} at ${sec(c.start)} s`);
  p(`Crashes: ${crashes.length ? `**${crashes.map((c) => `${c.detail} (at ${sec(c.start)} s)`).join('; ')}**` : 0}. ` +
    `Exit status on SIGTERM: ${exits.map(([n, s]) => `${n} ${s}`).join(', ')}.`);
  for (const [n, s] of exits) if (s !== '0') fail(`instance ${n} exit status ${s}`);
  p();
  // /readyz through each outage longer than 2.5 s: instances on Redis should say 503 (the exact
  // domain fails closed) at least once between 1.5 s into it and its end.
  const redisNames = cfg.instances.filter((i) => i.backend === 'redis').map((i) => i.name);
  for (const f of faults.filter((x) => (x.what === 'redis_kill' || x.what === 'redis_stop') && x.end - x.start > 2500)) {
    const during = ready.filter((x) => redisNames.includes(x.inst) && x.t >= f.start + 1500 && x.t <= f.end);
    const down = redisNames.filter((n) => during.some((x) => x.inst === n && x.status !== 200));
    const line = `${f.what} at ${sec(f.start)} s (${((f.end - f.start) / 1000).toFixed(1)} s): /readyz said not ready on ${down.length ? down.join(', ') : 'no instance'} of ${redisNames.join(', ')} (${during.length} samples)`;
    p(`- readiness: ${line}`);
    if (down.length < redisNames.length) fail(`readiness stayed up: ${line}`);
  }
  // A few counters from each instance's /metrics just before it stopped.
  const metric = (text, re) => text.split('\n').filter((l) => re.test(l) && !l.startsWith('#'))
    .reduce((sum, l) => sum + Number(l.trim().split(/\s+/).pop()), 0);
  for (const inst of cfg.instances) {
    const file = path.join(dir, `metrics-${inst.name}.txt`);
    if (!fs.existsSync(file)) continue;
    const m = fs.readFileSync(file, 'utf8');
    p(`- ${inst.name} (${inst.backend}) /metrics at the end: store entries ${metric(m, /^sluice_store_entries\b/)}, ` +
      `evictions ${metric(m, /^sluice_store_evictions_total\b/)}, reloads ${metric(m, /^sluice_config_reloads_total\{[^}]*success/)} applied / ` +
      `${metric(m, /^sluice_config_reloads_total\{[^}]*fail/)} refused, proxy refunds ${metric(m, /^sluice_proxy_refunds_total\b/)}` +
      (inst.backend === 'redis' ? `, breaker opened ${metric(m, /^sluice_backend_breaker_opened_total\b/)} times, backend timeouts ${metric(m, /^sluice_backend_timeouts_total\b/)}` : ''));
  }
  // Rules at the end: the last file written is valid; the instances on Redis share it and must
  // have loaded it (the file watcher), which a POST /v1/reload afterwards must not change.
  const versions = new Set(rulesFinal.filter(([n]) => redisNames.includes(n)).map((x) => x[1]));
  p(`- rules at the end: ${rulesFinal.map(([n, v, s, f, post]) => `${n} version ${v} (${s} reloads applied, ${f} refused; POST /v1/reload then: ${post})`).join('; ')}`);
  if (versions.size !== 1 || rulesFinal.length !== cfg.instances.length) fail(`the instances on Redis did not end on the same rules version (${[...versions].join(', ')})`);
  for (const [n, v, , , post] of rulesFinal) {
    if (v !== post) fail(`instance ${n} had not loaded the last rules file by itself (version ${v}, ${post} after POST /v1/reload)`);
  }
  p();

  // ------------------------------------------------------------ latency, rate, RSS over time
  const bucketMs = Math.max(1000, Math.round(cfg.seconds / 120) * 1000);
  const buckets = new Map();
  // Latency leaves out the proxy's stalls (the upstream holds them past http.upstream_timeout,
  // 504 by design) and unanswered requests.
  const timed = (r) => r.outcome !== 'noanswer' && !(r.outcome === 'refund' && r.status === '504');
  for (const r of requests) {
    if (!timed(r)) continue;
    const b = Math.floor((r.recv - t0) / bucketMs);
    (buckets.get(b) || buckets.set(b, []).get(b)).push(r.recv - r.send);
  }
  const series = [...buckets.entries()].sort((a, b) => a[0] - b[0]).map(([b, lat]) => {
    lat.sort((x, y) => x - y);
    return [(b * bucketMs) / 1000, lat.length / (bucketMs / 1000), quantile(lat, 0.5), quantile(lat, 0.99)];
  });
  fs.writeFileSync(path.join(dir, 'load.dat'), series.map((x) => x.join(' ')).join('\n') + '\n');
  for (const [g, file] of [['exact|hot|hot0', 'hot.dat'], ['mem|hot|hot0|m', 'memhot.dat']]) {
    fs.writeFileSync(path.join(dir, file), (hotSeries[g] || [[-10, 0, 0, 0]]).map((x) => x.join(' ')).join('\n') + '\n');
  }
  // (a point off the plot when there was no fault: gnuplot refuses an empty file)
  fs.writeFileSync(path.join(dir, 'faults.dat'), (faults.length ? faults : [{start: t0 - 10000, end: t0 - 10000, what: 'none'}])
    .map((f) => `${(f.start - t0) / 1000} ${(f.end - t0) / 1000} ${f.what}`).join('\n') + '\n');
  const floods = events.filter((e) => e.what === 'flood');
  fs.writeFileSync(path.join(dir, 'floods.dat'), (floods.length ? floods : [{start: t0 - 10000, end: t0 - 10000}])
    .map((f) => `${(f.start - t0) / 1000} ${(f.end - t0) / 1000}`).join('\n') + '\n');
  const names = cfg.instances.map((i) => i.name);
  for (const n of names) {
    fs.writeFileSync(path.join(dir, `rss-${n}.dat`), rss.filter((x) => x.inst === n).map((x) => `${(x.t - t0) / 1000} ${x.kb / 1024}`).join('\n') + '\n');
  }
  const lat = requests.filter(timed).map((r) => r.recv - r.send).sort((a, b) => a - b);
  const latFe = {};
  for (const r of requests) if (timed(r)) (latFe[r.fe] = latFe[r.fe] || []).push(r.recv - r.send);
  p('### Latency and memory');
  p();
  p(`Latency seen by the client (ms, every answered request, faults included, the proxy's deliberate upstream stalls left out): p50 ${quantile(lat, 0.5)}, p99 ${quantile(lat, 0.99)}, max ${lat[lat.length - 1] || 0}; ` +
    `p99 by frontend: ${Object.entries(latFe).sort().map(([k, v]) => `${k} ${quantile(v.sort((a, b) => a - b), 0.99)}`).join(', ')}. ` +
    `Worst ${bucketMs / 1000}-second p99: ${Math.max(0, ...series.map((x) => x[3]))} ms.`);
  p();
  // RSS: the median over 15 s after warm-up against the median of the last 10 s.
  const warm = t0 + Math.min(60, 0.25 * cfg.seconds) * 1000;
  p('| instance | RSS after warm-up (MiB) | at the end | max | growth |');
  p('|---|---:|---:|---:|---:|');
  for (const n of names) {
    const mine = rss.filter((x) => x.inst === n);
    if (!mine.length) continue;
    const base = median(mine.filter((x) => x.t >= warm && x.t < warm + 15000).map((x) => x.kb));
    const end = median(mine.slice(-10).map((x) => x.kb));
    const max = Math.max(...mine.map((x) => x.kb));
    const growth = base ? (end - base) / base : 0;
    p(`| ${n} (${cfg.instances.find((i) => i.name === n).backend}) | ${(base / 1024).toFixed(1)} | ${(end / 1024).toFixed(1)} | ${(max / 1024).toFixed(1)} | ${(100 * growth).toFixed(0)} % |`);
    if (growth > 0.5) fail(`RSS of ${n} grew ${(100 * growth).toFixed(0)} % after warm-up`);
  }
  p();
  p(`![requests per second](${phase}-rps.png) ![p99](${phase}-p99.png)`);
  p();
  p(`![RSS](${phase}-rss.png) ![admitted against the limit, exact hot0](${phase}-hot.png)`);
  p();
  p(`![admitted against the limit, mem hot0 on the memory store](${phase}-memhot.png)`);
  p();
}

const head = failures.length
  ? `**FAIL** — ${failures.length} check(s) failed:\n\n${failures.map((f) => `- ${f}`).join('\n')}\n`
  : '**PASS** — no crash, every request answered, no admission over an exact limit outside the periods counted apart, no denial under a limit, RSS flat, readiness followed Redis, rules converged.\n';
md.splice(2, 0, `Run ${new Date().toISOString().replace(/\.\d+Z/, 'Z')} on ${require('os').cpus().length} CPUs, \`bench/soak.sh\`.`, '', head);
fs.writeFileSync(path.join(outDir, 'report.md'), md.join('\n') + '\n');
console.log(head);
process.exit(failures.length ? 1 : 0);
