// Shared set-up for the client tests: where the server is, SDK clients that
// talk to it, what the configuration under test can carry, and small
// helpers. The driver (tests/integration/clients_test.sh) starts
// `strata serve --alias test-model` and sets:
//   STRATA_BASE_URL    http://127.0.0.1:PORT (no trailing slash, no /v1)
//   STRATA_SERVER_LOG  the server's log file (read to see what it noticed)
//   STRATA_CHAIN       the configuration: `direct` (the default: the server
//                      runs the model), or `openai` / `anthropic`: the server
//                      is a strata whose `--backend` is another strata that
//                      runs the model, reached over that API
//   STRATA_ENGINE_URL  the strata that runs the model (in a chain, the
//                      upstream; the default is STRATA_BASE_URL): its
//                      /metrics show the engine's state
//   STRATA_ENGINE_LOG  that server's log (the default is STRATA_SERVER_LOG)
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

export const BASE_URL = process.env.STRATA_BASE_URL;
if (!BASE_URL) {
  throw new Error('STRATA_BASE_URL is not set: run these tests through tests/integration/clients_test.sh');
}
export const SERVER_LOG = process.env.STRATA_SERVER_LOG ?? '';
export const MODEL = 'test-model';
export const CHAIN = process.env.STRATA_CHAIN || 'direct';
export const ENGINE_URL = process.env.STRATA_ENGINE_URL || BASE_URL;
export const ENGINE_LOG = process.env.STRATA_ENGINE_LOG || SERVER_LOG;

// What each configuration cannot carry, and why: the fields an Anthropic
// upstream has no place for are a 400 unsupported_by_backend (docs/api.md).
// A test that needs one of them is skipped, naming it; every other test
// runs, asserting the same, in every configuration.
const CANNOT = {
  direct: {},
  openai: {},
  anthropic: {
    n: 'n > 1 (the Anthropic API gives one choice per request)',
    seed: 'seed (the Anthropic API takes none)',
    logprobs: 'logprobs (the Anthropic API returns none)',
    completions: '/v1/completions (the Anthropic API has no prompt completions)',
  },
};
if (!CANNOT[CHAIN]) throw new Error(`STRATA_CHAIN is '${CHAIN}': want direct, openai or anthropic`);

// Whether the configuration carries `what` (n, seed, logprobs, completions).
export function carries(what) {
  return !(what in CANNOT[CHAIN]);
}

// Skips the test of context `t` when the configuration cannot carry `what`
// (`why`, if given, says what the test needed it for); returns whether it
// did, and the test then returns.
export function skipUnlessCarried(t, what, why = '') {
  if (carries(what)) return false;
  t.skip(`${why ? `${why}: ` : ''}an ${CHAIN} backend cannot carry ${CANNOT[CHAIN][what]}`);
  return true;
}

// The sampling fields of a long run that must not end early: temperature 1
// with `seed` (a seed whose sample runs to max_tokens), or greedy where no
// seed can be carried (the greedy text of either test model does not end
// before 1500 tokens; an unseeded sample of the synthetic one often does).
// Nothing asserted depends on which tokens are drawn.
export function longRun(seed) {
  return carries('seed') ? { temperature: 1, seed } : { temperature: 0 };
}

// No retries: a retried request would hide a 5xx or a dropped connection.
// The timeout is generous because the test machine may be busy.
export const openai = new OpenAI({
  baseURL: `${BASE_URL}/v1`,
  apiKey: 'unused',
  maxRetries: 0,
  timeout: 120_000,
});
export const anthropic = new Anthropic({
  baseURL: BASE_URL,
  apiKey: 'unused',
  maxRetries: 0,
  timeout: 120_000,
});

// A prompt that the real model (stories260K) continues with plain English.
export const PROMPT = 'Once upon a time';

// Picks a stop string from the middle of `text`: a substring of `len` chars
// whose first occurrence is at or after a third of the text, so that the
// output cut at it is a non-empty proper prefix. Returns {stop, before} or
// null when the text is too repetitive to have one.
export function pickStop(text, len = 6) {
  const from = Math.max(1, Math.floor(text.length / 3));
  for (let at = from; at + len <= text.length; ++at) {
    const stop = text.slice(at, at + len);
    if (stop.trim().length === 0) continue;
    if (text.indexOf(stop) === at) return { stop, before: text.slice(0, at) };
  }
  return null;
}

// Reads one un-labelled sample of a Prometheus metric from the engine's GET
// /metrics (in a chain the upstream's: the front runs no sequences).
export async function metric(name) {
  const res = await fetch(`${ENGINE_URL}/metrics`);
  assert.equal(res.status, 200);
  const body = await res.text();
  const m = body.match(new RegExp(`^${name}(?:\\{\\})? (\\S+)$`, 'm'));
  assert.ok(m, `GET /metrics has no sample of ${name}`);
  return Number(m[1]);
}

// Polls `probe` (async, returns a truthy value when done) every 50 ms for at
// most `timeoutMs`; returns the last value it gave.
export async function pollUntil(probe, timeoutMs = 10_000) {
  const end = Date.now() + timeoutMs;
  let v = await probe();
  while (!v && Date.now() < end) {
    await sleep(50);
    v = await probe();
  }
  return v;
}

// Lines of the server log mentioning `needle` (empty when no log is known).
export function serverLogLines(needle, log = SERVER_LOG) {
  if (!log) return [];
  return readFileSync(log, 'utf8').split('\n').filter((l) => l.includes(needle));
}

// The same in the engine's log (in a chain, the upstream's).
export function engineLogLines(needle) {
  return serverLogLines(needle, ENGINE_LOG);
}
