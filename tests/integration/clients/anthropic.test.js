// The official `@anthropic-ai/sdk` package against `strata serve`: messages,
// streaming, stop sequences, system prompts, error shapes, request ids, a
// client that aborts its stream, and token counting.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';

import {
  anthropic, CHAIN, longRun, metric, MODEL, pickStop, pollUntil, PROMPT, serverLogLines,
  skipUnlessCarried,
} from './common.js';

const MAX_TOKENS = 24;
const params = (extra = {}) => ({
  model: MODEL,
  max_tokens: MAX_TOKENS,
  temperature: 0,
  messages: [{ role: 'user', content: PROMPT }],
  ...extra,
});

let greedy = null;
async function greedyMessage() {
  if (!greedy) greedy = await anthropic.messages.create(params());
  return greedy;
}

function textOf(message) {
  assert.equal(message.content.length, 1);
  assert.equal(message.content[0].type, 'text');
  return message.content[0].text;
}

test('messages.create returns a text block, max_tokens and usage', async () => {
  const m = await greedyMessage();
  assert.match(m.id, /^msg_/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, MODEL);
  const text = textOf(m);
  assert.ok(text.length > 0, 'empty reply');
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 0);
  assert.equal(m.usage.output_tokens, MAX_TOKENS);
});

// Anthropic's input_tokens counts only the prompt tokens not read from the
// prefix cache; those read from it are cache_read_input_tokens. A repeated
// prompt hits the cache, so compare their sum.
function promptTokens(usage) {
  assert.ok(Number.isInteger(usage.input_tokens), `input_tokens ${usage.input_tokens}`);
  return usage.input_tokens + (usage.cache_read_input_tokens ?? 0);
}

test('messages.stream yields text deltas and the final message', async () => {
  const ref = await greedyMessage();
  const stream = anthropic.messages.stream(params());
  const events = [];
  let text = '';
  stream.on('streamEvent', (e) => events.push(e.type));
  stream.on('text', (delta) => { text += delta; });
  const final = await stream.finalMessage();
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  for (const t of ['content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta']) {
    assert.ok(events.includes(t), `no ${t} event in ${events}`);
  }
  assert.equal(text, textOf(ref));
  assert.equal(textOf(final), text);
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.stop_sequence, null);
  assert.equal(final.usage.output_tokens, ref.usage.output_tokens);
  assert.equal(promptTokens(final.usage), promptTokens(ref.usage));
});

test('create({stream: true}) yields the raw event sequence', async () => {
  const ref = await greedyMessage();
  const stream = await anthropic.messages.create(params({ stream: true }));
  let text = '';
  let stop = null;
  let outputTokens = null;
  let stopped = false;
  for await (const e of stream) {
    assert.ok(!stopped, 'an event after message_stop');
    if (e.type === 'content_block_delta') {
      assert.equal(e.delta.type, 'text_delta');
      text += e.delta.text;
    } else if (e.type === 'message_delta') {
      stop = e.delta.stop_reason;
      outputTokens = e.usage.output_tokens;
    } else if (e.type === 'message_stop') {
      stopped = true;
    }
  }
  assert.ok(stopped, 'no message_stop');
  assert.equal(text, textOf(ref));
  assert.equal(stop, 'max_tokens');
  assert.equal(outputTokens, MAX_TOKENS);
});

// A reference reply and a stop string from its middle: greedy when the text
// allows, else a seeded sample (see stopCase in openai.test.js); null (and
// `t` skipped) when that needs a seed the configuration cannot carry.
async function stopCase(t) {
  for (const extra of [{}, { temperature: 1, seed: 4321 }]) {
    if (extra.seed !== undefined &&
        skipUnlessCarried(t, 'seed', 'the greedy reply has no stop sequence to cut at')) {
      return null;
    }
    const ref = await anthropic.messages.create(params(extra));
    const pick = pickStop(textOf(ref));
    if (pick) return { ref, extra, ...pick };
  }
  assert.fail('neither the greedy nor a seeded reply has a usable stop string');
}

test('stop_sequences end the reply before the match and name it', async (t) => {
  const found = await stopCase(t);
  if (!found) return;
  const { ref, extra, stop, before } = found;
  const m = await anthropic.messages.create(params({ ...extra, stop_sequences: ['never-appears-xyz', stop] }));
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(textOf(m), before);
  assert.ok(m.usage.output_tokens < ref.usage.output_tokens);

  const final = await anthropic.messages.stream(params({ ...extra, stop_sequences: [stop] })).finalMessage();
  assert.equal(final.stop_reason, 'stop_sequence');
  assert.equal(final.stop_sequence, stop);
  assert.equal(textOf(final), before);
});

// A conversation ending with an assistant message is a prefill: the reply
// continues that text (stories260K finishes "Once upon a" with " time").
test('a trailing assistant message is continued, not answered', async () => {
  const m = await anthropic.messages.create({
    model: MODEL,
    max_tokens: 6,
    temperature: 0,
    messages: [
      { role: 'user', content: 'Tell me a story' },
      { role: 'assistant', content: 'Once upon a' },
    ],
  });
  assert.match(textOf(m), /^ time\b/);
});

test('a system prompt is accepted and changes the prompt', async () => {
  const ref = await greedyMessage();
  const m = await anthropic.messages.create(params({ system: 'You tell short stories.' }));
  assert.equal(m.type, 'message');
  assert.equal(typeof textOf(m), 'string');
  assert.ok(promptTokens(m.usage) > promptTokens(ref.usage),
    `${promptTokens(m.usage)} prompt tokens with a system prompt, ${promptTokens(ref.usage)} without`);
  const blocks = await anthropic.messages.create(
    params({ system: [{ type: 'text', text: 'You tell short stories.' }] }));
  assert.equal(textOf(blocks), textOf(m));
  assert.equal(promptTokens(blocks.usage), promptTokens(m.usage));
});

test('a missing max_tokens is a BadRequestError in the Anthropic error shape', async () => {
  const { max_tokens: _, ...rest } = params();
  await assert.rejects(anthropic.messages.create(rest), (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, `${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 400);
    assert.equal(e.error?.type, 'error');
    assert.equal(e.error?.error?.type, 'invalid_request_error');
    assert.match(e.error?.error?.message, /max_tokens/);
    return true;
  });
});

test('a prompt longer than the context is an invalid_request_error', async () => {
  const long = 'one two three four '.repeat(1500);
  await assert.rejects(
    anthropic.messages.create(params({ messages: [{ role: 'user', content: long }] })),
    (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, `${e?.constructor?.name}: ${e}`);
      assert.equal(e.error?.error?.type, 'invalid_request_error');
      assert.match(e.message, /context length exceeded/);
      return true;
    });
});

test('an unknown model is a NotFoundError in the Anthropic error shape', async () => {
  await assert.rejects(anthropic.messages.create(params({ model: 'no-such-model' })), (e) => {
    assert.ok(e instanceof Anthropic.NotFoundError, `${e?.constructor?.name}: ${e}`);
    assert.equal(e.status, 404);
    assert.equal(e.error?.error?.type, 'not_found_error');
    assert.match(e.message, /no-such-model/);
    return true;
  });
});

test('errors on a streaming request are thrown before any event', async () => {
  await assert.rejects(
    anthropic.messages.create(params({ model: 'no-such-model', stream: true })),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.error?.type === 'not_found_error');
  await assert.rejects(
    anthropic.messages.stream(params({ temperature: 1.5 })).finalMessage(),
    (e) => e instanceof Anthropic.BadRequestError && /temperature/.test(e.message));
});

test('the request id reaches the SDK as request-id', async () => {
  const { data, request_id } = await anthropic.messages
    .create(params({ max_tokens: 2 }), { headers: { 'X-Request-ID': 'client-id-anthropic-1' } })
    .withResponse();
  assert.equal(request_id, 'client-id-anthropic-1');
  assert.equal(data._request_id, 'client-id-anthropic-1');
  assert.equal(data.id, 'msg_client-id-anthropic-1');
});

test('aborting a message stream cancels it on the server', async () => {
  const stream = anthropic.messages.stream(params({ max_tokens: 1500, ...longRun(11) }));
  let deltas = 0;
  stream.on('text', () => {
    if (++deltas === 1) stream.abort();
  });
  await assert.rejects(stream.finalMessage(), (e) => e instanceof Anthropic.APIUserAbortError);
  assert.ok(stream.aborted);
  const rid = stream.request_id;
  assert.ok(rid, 'no request-id header on the stream');
  const noted = await pollUntil(
    () => serverLogLines(`req=${rid}`).some((l) => l.includes('client disconnected')), 30_000);
  assert.ok(noted, `the server log never says request ${rid} was cancelled as a disconnect`);
  const idle = await pollUntil(async () => (await metric('strata_running_sequences')) === 0, 10_000);
  assert.ok(idle, 'strata_running_sequences did not return to 0');
  const m = await anthropic.messages.create(params({ max_tokens: 3 }));
  assert.equal(m.usage.output_tokens, 3);
});

test('messages.countTokens counts the prompt messages.create reads', async (t) => {
  const body = {
    model: MODEL,
    system: 'You answer in one word.',
    messages: [
      { role: 'user', content: `${PROMPT} (counted)` },
      { role: 'assistant', content: 'Yes.' },
      { role: 'user', content: [{ type: 'text', text: 'And once more?' }] },
    ],
  };
  if (CHAIN === 'openai') {
    // An OpenAI upstream has no token counting: a clear 400, Anthropic's shape.
    await assert.rejects(anthropic.messages.countTokens(body), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, `${e?.constructor?.name}: ${e}`);
      assert.equal(e.error?.error?.type, 'invalid_request_error');
      assert.match(e.message, /count/);
      return true;
    });
    t.diagnostic('an openai backend answers countTokens with 400 unsupported_by_backend');
    return;
  }
  const counted = await anthropic.messages.countTokens(body);
  assert.ok(Number.isInteger(counted.input_tokens) && counted.input_tokens > 0,
    JSON.stringify(counted));
  const m = await anthropic.messages.create({ ...body, max_tokens: 2, temperature: 0 });
  const read = promptTokens(m.usage) + (m.usage.cache_creation_input_tokens ?? 0);
  assert.equal(counted.input_tokens, read, JSON.stringify(m.usage));
});
