// The response watermark through the official SDKs: every server of these
// tests runs with --watermark-key-file and --audit-log (clients_test.sh).
// A whole answer's x-strata-watermark reaches the SDK's response headers; a
// stream's watermark is an SSE comment line that both SDKs skip (their
// streams yield exactly the chunks and events they would without it); and
// `strata watermark verify` accepts both (STRATA_BIN, STRATA_WATERMARK_KEY).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'node:test';

import { anthropic, BASE_URL, MODEL, openai, PROMPT } from './common.js';

const BIN = process.env.STRATA_BIN;
const KEY = process.env.STRATA_WATERMARK_KEY;
const MARK = /^v1:[0-9a-f]{16}:[0-9a-f]{64}$/;
const dir = mkdtempSync(join(tmpdir(), 'strata-watermark-'));

// `strata watermark verify` on a saved response (and extra arguments): its exit code.
function verify(name, bytes, extra = []) {
  const file = join(dir, name);
  writeFileSync(file, bytes);
  try {
    execFileSync(BIN, ['watermark', 'verify', '--key-file', KEY, '--response', file, ...extra], {
      stdio: 'pipe',
    });
    return 0;
  } catch (e) {
    if (typeof e.status !== 'number') throw e;
    return e.status;
  }
}

async function post(path, body, headers = {}) {
  return fetch(`${BASE_URL}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'unused', ...headers },
    body: JSON.stringify(body),
  });
}

test('a whole chat answer carries x-strata-watermark to the SDK, and it verifies', async () => {
  const { data, response } = await openai.chat.completions
    .create({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 8 })
    .withResponse();
  const mark = response.headers.get('x-strata-watermark');
  assert.match(mark ?? '', MARK);
  assert.ok(data.choices[0].message.content.length > 0);
  const body = JSON.stringify(data);
  assert.equal(verify('chat.json', body, ['--watermark', mark, '--request-id', response.headers.get('x-request-id')]), 0);
  // Another text under the same mark is refused.
  const changed = structuredClone(data);
  changed.choices[0].message.content += ' (edited)';
  assert.equal(verify('changed.json', JSON.stringify(changed), ['--watermark', mark, '--request-id', response.headers.get('x-request-id')]), 1);
});

test('an Anthropic message carries the watermark to the SDK', async () => {
  const { data, response } = await anthropic.messages
    .create({ model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: PROMPT }] })
    .withResponse();
  const mark = response.headers.get('x-strata-watermark');
  assert.match(mark ?? '', MARK);
  assert.equal(verify('message.json', JSON.stringify(data), ['--watermark', mark, '--request-id', response.headers.get('request-id')]), 0);
});

test('an OpenAI stream ends with the watermark comment, which the SDK never yields', async () => {
  // The bytes as sent: the comment comes after the last text, before [DONE].
  const res = await post('/v1/chat/completions', {
    model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 8, stream: true,
    stream_options: { include_usage: true },
  });
  assert.equal(res.status, 200);
  const raw = await res.text();
  const at = raw.indexOf('\n: x-strata-watermark: v1:');
  assert.ok(at > 0, raw);
  assert.ok(at < raw.indexOf('data: [DONE]'));
  assert.equal(verify('chat.sse', raw), 0);
  // Through the SDK: the same chunks as ever, none of them a stray.
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: 8, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    else text += chunk.choices[0].delta.content ?? '';
  }
  assert.ok(text.length > 0);
  assert.equal(usage.completion_tokens, 8);
});

test('an Anthropic stream ends with the watermark comment, which the SDK never yields', async () => {
  const res = await post('/v1/messages', {
    model: MODEL, max_tokens: 8, stream: true, messages: [{ role: 'user', content: PROMPT }],
  });
  assert.equal(res.status, 200);
  const raw = await res.text();
  assert.ok(raw.includes('\n: x-strata-watermark: v1:'), raw);
  assert.equal(verify('message.sse', raw), 0);
  const known = new Set(['message_start', 'content_block_start', 'content_block_delta',
    'content_block_stop', 'message_delta', 'message_stop']);
  const stream = anthropic.messages.stream({
    model: MODEL, max_tokens: 8, messages: [{ role: 'user', content: PROMPT }],
  });
  for await (const event of stream) assert.ok(known.has(event.type), event.type);
  const final = await stream.finalMessage();
  assert.equal(final.usage.output_tokens, 8);
});
