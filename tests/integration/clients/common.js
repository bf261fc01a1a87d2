// Shared set-up for the client tests: where the server is, SDK clients that
// talk to it, and small helpers. The driver (tests/integration/clients_test.sh)
// starts `strata serve --alias test-model` and sets:
//   STRATA_BASE_URL    http://127.0.0.1:PORT (no trailing slash, no /v1)
//   STRATA_SERVER_LOG  the server's log file (read to see what it noticed)
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

// Reads one un-labelled sample of a Prometheus metric from GET /metrics.
export async function metric(name) {
  const res = await fetch(`${BASE_URL}/metrics`);
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
export function serverLogLines(needle) {
  if (!SERVER_LOG) return [];
  return readFileSync(SERVER_LOG, 'utf8').split('\n').filter((l) => l.includes(needle));
}
