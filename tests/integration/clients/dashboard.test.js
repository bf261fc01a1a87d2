// GET /dashboard in a real browser (Debian's headless Chromium, driven by
// playwright-core): the page loads with nothing from another origin, draws
// under traffic, and once the traffic stops every number it shows is the one
// /metrics says. Run by tests/integration/clients_test.sh in its `dashboard`
// configuration, which starts the server with two tenants' API keys
// (STRATA_DASHBOARD_KEYS: "KEY TENANT" lines) and an RT-Switcher whose
// latency bounds every request breaches, so that it steps down and the page
// has a decision and its reason to show. A screenshot is kept in
// STRATA_ARTIFACTS_DIR (default: build/test-artifacts) as dashboard.png.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { test, after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

import { chromium } from 'playwright-core';

const BASE_URL = process.env.STRATA_BASE_URL;
if (!BASE_URL) throw new Error('STRATA_BASE_URL is not set: run through tests/integration/clients_test.sh');
const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, '../../..');
const ARTIFACTS = process.env.STRATA_ARTIFACTS_DIR || join(ROOT, 'build', 'test-artifacts');
const CHROMIUM = process.env.STRATA_CHROMIUM || '/usr/bin/chromium';
const KEYS = (process.env.STRATA_DASHBOARD_KEYS || '')
  .split('\n')
  .filter((l) => l.trim() !== '')
  .map((l) => l.trim().split(/\s+/));
const ADMIN_KEY = process.env.STRATA_ADMIN_KEY || '';
const MODEL = 'test-model';

// The Prometheus text's samples as [name, {labels}, value].
function parseMetrics(text) {
  const out = [];
  const re = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line === '') continue;
    const m = re.exec(line);
    if (!m) continue;
    const labels = {};
    for (const [, k, v] of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[k] = v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    out.push([m[1], labels, Number(m[3])]);
  }
  return out;
}
function sum(samples, name, match = {}) {
  let s = 0;
  for (const [n, labels, v] of samples) {
    if (n !== name) continue;
    if (Object.entries(match).every(([k, want]) => (want instanceof RegExp ? want.test(labels[k] ?? '') : labels[k] === want))) s += v;
  }
  return s;
}
const shown = (v) => Math.round(v).toLocaleString('en-US');
const shownPct = (h, m) => (h + m > 0 ? ((100 * h) / (h + m)).toFixed(1) + ' %' : '–');

async function chat(key, content, { stream = false, maxTokens = 8 } = {}) {
  const res = await fetch(`${BASE_URL}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: maxTokens, temperature: 0, stream }),
  });
  await res.text();
  return res.status;
}

let browser;
let context;
before(async () => {
  assert.ok(KEYS.length >= 2, 'STRATA_DASHBOARD_KEYS must name two tenants');
  try {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  } catch (e) {
    throw new Error(`cannot start Chromium at ${CHROMIUM} (Debian's package chromium; STRATA_CHROMIUM names another): ${e.message}`);
  }
  context = await browser.newContext({
    viewport: { width: 1400, height: 1300 },
    ...(ADMIN_KEY ? { httpCredentials: { username: 'admin', password: ADMIN_KEY } } : {}),
  });
});
after(async () => {
  await browser?.close();
});

test('the page and its state need the admin key', async () => {
  assert.ok(ADMIN_KEY, 'STRATA_ADMIN_KEY must be set: the server runs with --admin-key-file');
  for (const path of ['/dashboard', '/dashboard/state']) {
    const none = await fetch(`${BASE_URL}${path}`);
    assert.equal(none.status, 401);
    assert.match(none.headers.get('www-authenticate'), /^Basic realm=/);
    const tenant = await fetch(`${BASE_URL}${path}`, { headers: { authorization: `Bearer ${KEYS[0][0]}` } });
    assert.equal(tenant.status, 401, 'an API key is not the admin key');
  }
});

test('the page is served whole, with a policy that keeps it on this origin', async () => {
  const res = await fetch(`${BASE_URL}/dashboard`, ADMIN_KEY ? { headers: { authorization: `Bearer ${ADMIN_KEY}` } } : {});
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^text\/html/);
  assert.match(res.headers.get('content-security-policy'), /default-src 'none'/);
  assert.match(res.headers.get('content-security-policy'), /connect-src 'self'/);
  const html = await res.text();
  // Nothing is fetched from elsewhere: no absolute URL in a src or href.
  assert.doesNotMatch(html, /(src|href)\s*=\s*["']?(https?:)?\/\//i);
  const state = await (await fetch(`${BASE_URL}/dashboard/state`, ADMIN_KEY ? { headers: { authorization: `Bearer ${ADMIN_KEY}` } } : {})).json();
  assert.deepEqual(state.models, [MODEL]);
  assert.equal(typeof state.rt_switcher.level, 'number');
});

test('the Grafana dashboard reads only series that /metrics documents', () => {
  const grafana = readFileSync(join(ROOT, 'deploy/grafana/strata-dashboard.json'), 'utf8');
  JSON.parse(grafana);
  const documented = readFileSync(join(ROOT, 'docs/metrics.md'), 'utf8');
  const names = new Set([...grafana.matchAll(/strata_[a-z0-9_]+/g)].map((m) => m[0].replace(/_bucket$/, '')));
  names.delete('strata_overview');  // the dashboard's uid
  assert.ok(names.size >= 10);
  for (const name of names) assert.ok(documented.includes('`' + name + '`'), `${name} is not in docs/metrics.md`);
});

test('under traffic the page draws; after it, every number matches /metrics', async () => {
  const page = await context.newPage();
  const foreign = [];
  const failures = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(BASE_URL)) foreign.push(r.url());
  });
  page.on('pageerror', (e) => failures.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') failures.push(m.text());
  });
  await page.goto(`${BASE_URL}/dashboard?interval=0.3`);
  const reads = () => page.evaluate(() => Number(document.body.dataset.reads));

  // Traffic from both tenants while the page reads: repeats (L1 hits after
  // the first), streams, new prompts (misses), and a bad request (a 400).
  let stop = false;
  const statuses = [];
  const traffic = KEYS.map(async ([key], t) => {
    for (let i = 0; !stop || i < 6; i++) {
      // Even: one of two repeated questions (L1 hits after the first); odd: a
      // new one (a miss, whose latency the RT-Switcher sees).
      const q = i % 2 === 0 ? `repeated question ${i % 4} from tenant ${t}` : `new question ${i} from tenant ${t}`;
      statuses.push(await chat(key, q, { stream: i % 4 === 1 }));
      if (i % 5 === 4) statuses.push(await chat(key, '', { maxTokens: -1 }));
      await sleep(20);
    }
  });
  const t0 = await reads();
  for (let i = 0; i < 200 && (await reads()) < t0 + 10; i++) await sleep(100);
  assert.ok((await reads()) >= t0 + 10, 'the page did not read /metrics 10 times in 20 s');
  // Under traffic the charts have lines and the rate is not zero.
  const paths = await page.evaluate(() => document.querySelectorAll('#chart-rate path').length);
  assert.ok(paths >= 1, 'the request-rate chart drew nothing under traffic');
  stop = true;
  await Promise.all(traffic);
  assert.ok(statuses.includes(200) && statuses.includes(400), `statuses seen: ${[...new Set(statuses)]}`);

  // Quiet now: wait for the switcher's decision to be listed and for two
  // fresh reads, then compare every number with one read of /metrics.
  for (let i = 0; i < 100; i++) {
    const st = await (await fetch(`${BASE_URL}/dashboard/state`, ADMIN_KEY ? { headers: { authorization: `Bearer ${ADMIN_KEY}` } } : {})).json();
    if (st.rt_switcher.switches.length > 0) break;
    await sleep(100);
  }
  await sleep(300);  // the scheduler publishes its stats after each step
  const text = await (await fetch(`${BASE_URL}/metrics`)).text();
  const r0 = await reads();
  for (let i = 0; i < 100 && (await reads()) < r0 + 2; i++) await sleep(100);
  const m = parseMetrics(text);
  const ui = await page.evaluate(() => {
    const o = {};
    for (const el of document.querySelectorAll('[id]')) o[el.id] = el.textContent;
    return o;
  });
  const expect = (id, want) => assert.equal(ui[id], want, `#${id} shows ${ui[id]}, /metrics says ${want}`);

  expect('kpi-requests', shown(sum(m, 'strata_http_requests_total')));
  expect('kpi-failed', shown(sum(m, 'strata_http_requests_total', { status: /^(5..|429)$/ })));
  expect('kpi-queue', shown(sum(m, 'strata_queue_depth')));
  expect('kpi-running', shown(sum(m, 'strata_running_sequences')));
  expect('kpi-kv-used', shown(sum(m, 'strata_kv_blocks_used')));
  expect('kpi-kv-free', shown(sum(m, 'strata_kv_blocks_free')));
  expect('kpi-kv-shared', shown(sum(m, 'strata_kv_blocks_shared')));
  for (const tier of ['l1', 'l2', 'l3']) {
    const h = sum(m, 'strata_cache_hits_total', { tier });
    const mi = sum(m, 'strata_cache_misses_total', { tier });
    expect(`tier-${tier}-hits`, shown(h));
    expect(`tier-${tier}-misses`, shown(mi));
    expect(`tier-${tier}-rate`, shownPct(h, mi));
  }
  assert.ok(sum(m, 'strata_cache_hits_total', { tier: 'l1' }) > 0, 'the repeats should have hit L1');
  for (const [, tenant] of KEYS) {
    const id = `tenant-${tenant}`;
    expect(`${id}-requests`, shown(sum(m, 'strata_tenant_requests_total', { tenant })));
    expect(`${id}-ok`, shown(sum(m, 'strata_tenant_requests_total', { tenant, result: 'ok' })));
    expect(`${id}-errors`, shown(sum(m, 'strata_tenant_requests_total', { tenant, result: 'error' })));
    expect(`${id}-hits`, shown(sum(m, 'strata_tenant_requests_total', { tenant, cache: /^(l1|l3|coalesced)$/ })));
    expect(`${id}-prompt`, shown(sum(m, 'strata_tenant_tokens_total', { tenant, kind: 'prompt' })));
    expect(`${id}-completion`, shown(sum(m, 'strata_tenant_tokens_total', { tenant, kind: 'completion' })));
    assert.ok(sum(m, 'strata_tenant_requests_total', { tenant, result: 'ok' }) > 0, `${tenant} sent requests`);
  }
  // The switcher stepped down, and the page says so with its reason.
  expect('rt-down', shown(sum(m, 'strata_rt_switch_total', { direction: 'down' })));
  expect('rt-level', shown(sum(m, 'strata_rt_level')));
  assert.ok(sum(m, 'strata_rt_switch_total', { direction: 'down' }) >= 1, 'the RT-Switcher never stepped down');
  const state = await (await fetch(`${BASE_URL}/dashboard/state`, ADMIN_KEY ? { headers: { authorization: `Bearer ${ADMIN_KEY}` } } : {})).json();
  const listed = await page.evaluate(() => [...document.querySelectorAll('#switches tr')].map((tr) => tr.textContent));
  assert.equal(listed.length, state.rt_switcher.switches.length);
  assert.ok(listed.some((t) => t.includes(state.rt_switcher.switches[0].reason)), 'the first switch reason is not shown');

  assert.deepEqual(foreign, [], 'the page fetched from another origin');
  assert.deepEqual(failures, [], 'the page logged errors');
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
  await page.close();
});
