// sluice's operator console: polls this admin port once a second (GET /metrics, /readyz,
// /v1/rules, /v1/top) and draws what it finds; the key inspector asks /v1/limits and
// /v1/explain, and resets a key with DELETE /v1/limits and the admin token typed in the header.
// Plain DOM and SVG, no library: nothing is fetched from anywhere but the admin port.
'use strict';

const kPollMs = 1000;
const kPoints = 120;  // the chart's width: two minutes at one point a second

const $ = (id) => document.getElementById(id);
const state = {
  previous: null,       // the last scrape's decision counters, by "domain|limit|decision"
  previousAt: 0,
  history: [],          // [{allowed, denied}] per second, oldest first
  domains: [],
};

// Prometheus text format: [{name, labels: {..}, value}] (comments and blank lines skipped).
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3])) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, '$1');
    }
    out.push({name: m[1], labels, value: Number(m[4])});
  }
  return out;
}

function cell(text) {
  const td = document.createElement('td');
  td.textContent = String(text);
  return td;
}

function fillTable(id, rows) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows.map((values) => {
    const tr = document.createElement('tr');
    tr.append(...values.map(cell));
    return tr;
  }));
}

function seconds(ms) {
  if (ms === undefined || ms === null) return '';
  return ms >= 10000 ? `${Math.round(ms / 1000)} s` : `${(ms / 1000).toFixed(1)} s`;
}

async function get(path, options) {
  const response = await fetch(path, Object.assign({cache: 'no-store'}, options || {}));
  return {status: response.status, text: await response.text()};
}

function drawChart() {
  const svg = $('chart');
  const h = state.history;
  const most = Math.max(1, ...h.map((p) => Math.max(p.allowed, p.denied)));
  const line = (key) => h.map((p, i) => {
    const x = (600 * i) / Math.max(1, h.length - 1);  // the history so far, up to two minutes
    const y = 155 - (150 * p[key]) / most;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  }).join(' ');
  const ns = 'http://www.w3.org/2000/svg';
  const make = (cls, key) => {
    const p = document.createElementNS(ns, 'polyline');
    p.setAttribute('class', cls);
    p.setAttribute('points', line(key));
    p.setAttribute('data-last', h.length ? String(h[h.length - 1][key]) : '0');
    return p;
  };
  $('chart-scale').textContent = `top of the chart: ${most.toFixed(1)}/s, ` +
    `last ${h.length} s (green allowed, red denied)`;
  svg.replaceChildren(make('allowed', 'allowed'), make('denied', 'denied'));
}

function updateRates(samples) {
  const now = performance.now();
  const counters = {};
  const configured = {};
  for (const s of samples) {
    if (s.name === 'sluice_decisions_total') {
      counters[`${s.labels.domain}|${s.labels.limit}|${s.labels.decision}`] = s.value;
    } else if (s.name === 'sluice_limit') {
      configured[`${s.labels.domain}|${s.labels.limit}`] = s.value;
    }
  }
  if (state.previous) {
    const elapsed = Math.max(0.001, (now - state.previousAt) / 1000);
    const rows = {};
    let allowed = 0;
    let denied = 0;
    for (const [key, value] of Object.entries(counters)) {
      const [domain, limit, decision] = key.split('|');
      const rate = Math.max(0, value - (state.previous[key] || 0)) / elapsed;
      const row = rows[`${domain}|${limit}`] || (rows[`${domain}|${limit}`] = {allowed: 0, denied: 0});
      row[decision === 'denied' ? 'denied' : 'allowed'] += rate;
      if (decision === 'denied') denied += rate; else allowed += rate;
    }
    state.history.push({allowed, denied});
    if (state.history.length > kPoints) state.history.shift();
    fillTable('rates', Object.entries(rows).sort().map(([key, r]) => {
      const [domain, limit] = key.split('|');
      return [domain, limit, r.allowed.toFixed(1), r.denied.toFixed(1),
        configured[key] === undefined ? '' : configured[key]];
    }));
    drawChart();
  }
  state.previous = counters;
  state.previousAt = now;
  // The backend's own series: health, breaker, leases, Redis calls (never labelled by key).
  fillTable('backend-metrics', samples
    .filter((s) => /^sluice_(backend|redis|lease|breaker|hot|over_limit|store)_/.test(s.name))
    .slice(0, 40)
    .map((s) => {
      const labels = Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(',');
      return [labels ? `${s.name}{${labels}}` : s.name, s.value];
    }));
}

async function pollTop() {
  const rows = [];
  const span = $('top-window').value;
  for (const domain of state.domains) {
    const r = await get(`/v1/top?domain=${encodeURIComponent(domain)}&by=denied&window=${span}&limit=10`);
    if (r.status !== 200) continue;
    for (const k of JSON.parse(r.text).keys) {
      rows.push([domain, k.key, k.limit, k.count,
        k.state ? `${k.state.remaining}/${k.state.limit}` : '', k.state ? seconds(k.state.reset_after_ms) : '']);
    }
  }
  fillTable('top', rows);
}

async function poll() {
  try {
    const [metrics, ready, rules] = await Promise.all([get('/metrics'), get('/readyz'), get('/v1/rules')]);
    $('ready').textContent = ready.status === 200 ? 'ready' : 'not ready';
    $('ready').className = `badge ${ready.status === 200 ? 'up' : 'down'}`;
    $('backend').textContent = ready.text.trim();
    if (metrics.status === 200) updateRates(parseMetrics(metrics.text));
    if (rules.status === 200) showRules(JSON.parse(rules.text));
    await pollTop();
  } catch (e) {
    $('ready').textContent = 'unreachable';
    $('ready').className = 'badge down';
  }
}

function showRules(rules) {
  $('version').textContent = `config ${rules.version}`;
  $('rules-summary').textContent = `${rules.limits} limits; reloads: ${rules.reload_successes} ` +
    `applied, ${rules.reload_failures} refused`;
  fillTable('rules', rules.domains.map((d) => [d.name, d.file, d.limits]));
  const names = rules.domains.map((d) => d.name);
  if (names.join() !== state.domains.join()) {
    state.domains = names;
    const select = $('inspect-domain');
    const chosen = select.value;
    select.replaceChildren(...names.map((n) => new Option(n, n, false, n === chosen)));
  }
}

function inspectQuery() {
  return `domain=${encodeURIComponent($('inspect-domain').value)}` +
    `&descriptors=${encodeURIComponent($('inspect-descriptors').value)}`;
}

function say(text, error) {
  $('inspect-message').textContent = text;
  $('inspect-message').className = error ? 'message error' : 'message';
}

async function inspect() {
  const [limits, explain] = await Promise.all([get(`/v1/limits?${inspectQuery()}`),
    get(`/v1/explain?${inspectQuery()}`)]);
  if (limits.status !== 200) {
    fillTable('state', []);
    say(`${limits.status}: ${limits.text}`, true);
  } else {
    const answer = JSON.parse(limits.text);
    fillTable('state', answer.statuses.map((s) => [s.name, s.remaining, s.limit,
      seconds(s.reset_after_ms)]));
    say(answer.statuses.length ? '' : 'no limit applies', false);
  }
  $('explain').textContent = explain.status === 200 ? JSON.parse(explain.text).explanation : '';
}

async function reset() {
  const headers = {};
  const token = $('token').value;
  if (token) headers.Authorization = `Bearer ${token}`;
  const r = await get(`/v1/limits?${inspectQuery()}`, {method: 'DELETE', headers});
  if (r.status === 200) {
    say(`reset: ${r.text}`, false);
    await inspect();
    say(`reset: ${r.text}`, false);
  } else {
    say(`reset refused (${r.status}): ${r.text}`, true);
  }
}

$('inspect').addEventListener('submit', (e) => {
  e.preventDefault();
  inspect();
});
$('reset').addEventListener('click', reset);
poll();
setInterval(poll, kPollMs);
