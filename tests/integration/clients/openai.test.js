// The official `openai` package against `strata serve`: chat and legacy
// completions, streaming, stop strings, n, seed, logprobs, models, errors,
// request ids and a client that walks away mid-stream.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import OpenAI from 'openai';

import {
  BASE_URL, longRun, metric, MODEL, openai, pickStop, pollUntil, PROMPT, serverLogLines,
  skipUnlessCarried,
} from './common.js';

const MAX_TOKENS = 32;
const chatParams = (extra = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content: PROMPT }],
  max_tokens: MAX_TOKENS,
  temperature: 0,
  ...extra,
});

// Streams a chat completion; returns the text, the chunks and the final state.
async function streamChat(params) {
  const stream = await openai.chat.completions.create({ ...params, stream: true });
  const out = { text: '', chunks: [], finish: null, usage: null, roles: [], tokens: 0 };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      assert.equal(c.index, 0);
      if (c.delta?.role) out.roles.push(c.delta.role);
      if (typeof c.delta?.content === 'string') out.text += c.delta.content;
      if (c.logprobs?.content) out.tokens += c.logprobs.content.length;
      if (c.finish_reason) {
        assert.equal(out.finish, null, 'a second finish_reason');
        out.finish = c.finish_reason;
      }
    }
  }
  return out;
}

let greedy = null;  // the greedy chat reply, shared by later tests
async function greedyChat() {
  if (!greedy) greedy = await openai.chat.completions.create(chatParams());
  return greedy;
}

test('chat.completions.create returns the OpenAI shape with consistent usage', async () => {
  const r = await greedyChat();
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.ok(Number.isInteger(r.created) && r.created > 1_600_000_000, `created ${r.created}`);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.index, 0);
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content.length > 0, 'empty reply');
  assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
  const u = r.usage;
  assert.ok(u.prompt_tokens > 0);
  assert.ok(u.completion_tokens > 0 && u.completion_tokens <= MAX_TOKENS);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  if (c.finish_reason === 'length') assert.equal(u.completion_tokens, MAX_TOKENS);
});

// As with Anthropic's prefill, a chat that ends with an assistant message is
// continued (vLLM's continue_final_message, llama-server's prefill).
test('a chat ending with an assistant message is continued', async () => {
  const c = await openai.chat.completions.create({
    model: MODEL,
    max_tokens: 6,
    temperature: 0,
    messages: [
      { role: 'user', content: 'Tell me a story' },
      { role: 'assistant', content: 'Once upon a' },
    ],
  });
  assert.match(c.choices[0].message.content, /^ time\b/);
});

test('greedy decoding is deterministic', async () => {
  const a = await greedyChat();
  const b = await openai.chat.completions.create(chatParams());
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.choices[0].finish_reason, a.choices[0].finish_reason);
  assert.deepEqual(b.usage, a.usage);
});

test('streaming yields content deltas, one finish_reason and a matching usage chunk', async () => {
  const ref = await greedyChat();
  const s = await streamChat(chatParams({ stream_options: { include_usage: true } }));
  assert.deepEqual(s.roles, ['assistant'], 'the role arrives once, first');
  const contentChunks = s.chunks.filter((c) => c.choices[0]?.delta?.content);
  assert.ok(contentChunks.length >= 1, 'no content delta');
  assert.equal(s.finish, ref.choices[0].finish_reason);
  assert.equal(s.text, ref.choices[0].message.content, 'streamed text differs from the non-streamed');
  // The usage chunk comes last, with no choices.
  const last = s.chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.ok(s.usage, 'no usage chunk despite include_usage');
  assert.equal(s.usage.completion_tokens, ref.usage.completion_tokens);
  assert.equal(s.usage.prompt_tokens, ref.usage.prompt_tokens);
  assert.equal(s.usage.total_tokens, s.usage.prompt_tokens + s.usage.completion_tokens);
  // Every chunk of one stream shares the id.
  assert.equal(new Set(s.chunks.map((c) => c.id)).size, 1);
});

test('the usage chunk counts the tokens streamed (by their logprobs)', async (t) => {
  if (skipUnlessCarried(t, 'logprobs')) return;
  const ref = await greedyChat();
  const s = await streamChat(chatParams({
    stream_options: { include_usage: true },
    logprobs: true,
  }));
  assert.equal(s.text, ref.choices[0].message.content, 'streamed text differs from the non-streamed');
  assert.ok(s.usage, 'no usage chunk despite include_usage');
  assert.equal(s.usage.completion_tokens, s.tokens,
    'usage.completion_tokens differs from the tokens streamed (counted by their logprobs)');
  assert.equal(s.usage.completion_tokens, ref.usage.completion_tokens);
});

test('streaming without include_usage sends no usage', async () => {
  const s = await streamChat(chatParams({ max_tokens: 4 }));
  assert.equal(s.usage, null);
  assert.equal(s.finish, 'length');
});

// A reference reply and a stop string from its middle. Greedy text is used
// when it has one; a random-weight model (the synthetic fallback) tends to
// repeat one token greedily, so then a seeded sample is the reference: it is
// just as deterministic, and stop strings do not change which tokens are drawn.
// Null (and `t` skipped) when the greedy text has none and the configuration
// cannot carry a seed.
async function stopCase(t) {
  for (const extra of [{}, { temperature: 1, seed: 4321 }]) {
    if (extra.seed !== undefined &&
        skipUnlessCarried(t, 'seed', 'the greedy reply has no stop string to cut at')) {
      return null;
    }
    const ref = await openai.chat.completions.create(chatParams(extra));
    const pick = pickStop(ref.choices[0].message.content);
    if (pick) return { ref, extra, ...pick };
  }
  assert.fail('neither the greedy nor a seeded reply has a usable stop string');
}

test('a stop string ends the reply before it, streaming or not', async (t) => {
  const found = await stopCase(t);
  if (!found) return;
  const { ref, extra, stop, before } = found;
  const r = await openai.chat.completions.create(chatParams({ ...extra, stop: [stop, 'never-appears-xyz'] }));
  assert.equal(r.choices[0].message.content, before);
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(!r.choices[0].message.content.includes(stop));
  assert.ok(r.usage.completion_tokens < ref.usage.completion_tokens);

  const s = await streamChat(chatParams({ ...extra, stop }));
  assert.equal(s.text, before);
  assert.equal(s.finish, 'stop');
  for (const c of s.chunks) {
    assert.ok(!(c.choices[0]?.delta?.content ?? '').includes(stop), 'a chunk holds the stop string');
  }
});

test('n: 2 returns two choices', async (t) => {
  if (skipUnlessCarried(t, 'n')) return;
  const ref = await greedyChat();
  const r = await openai.chat.completions.create(chatParams({ n: 2 }));
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  let sum = 0;
  for (const c of r.choices) {
    assert.equal(c.message.content, ref.choices[0].message.content, `choice ${c.index} is not the greedy reply`);
    assert.equal(c.finish_reason, ref.choices[0].finish_reason);
    sum += ref.usage.completion_tokens;
  }
  assert.equal(r.usage.completion_tokens, sum);
  assert.equal(r.usage.prompt_tokens, ref.usage.prompt_tokens);
});

test('a seed makes temperature 1 sampling reproducible', async (t) => {
  if (skipUnlessCarried(t, 'seed')) return;
  const params = chatParams({ temperature: 1, seed: 1234 });
  const a = await openai.chat.completions.create(params);
  const b = await openai.chat.completions.create(params);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  const other = await openai.chat.completions.create({ ...params, seed: 99 });
  assert.notEqual(other.choices[0].message.content, a.choices[0].message.content,
    'another seed gave the same sample');
});

test('logprobs: true with top_logprobs: 2 gives per-token logprobs', async (t) => {
  if (skipUnlessCarried(t, 'logprobs')) return;
  const ref = await greedyChat();
  const r = await openai.chat.completions.create(chatParams({ logprobs: true, top_logprobs: 2 }));
  const c = r.choices[0];
  assert.equal(c.message.content, ref.choices[0].message.content);
  const lps = c.logprobs?.content;
  assert.ok(Array.isArray(lps), 'choices[0].logprobs.content is missing');
  assert.equal(lps.length, r.usage.completion_tokens);
  assert.equal(lps.map((t) => t.token).join(''), c.message.content);
  for (const t of lps) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0 && Number.isFinite(t.logprob), `logprob ${t.logprob}`);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob, 'top_logprobs not sorted');
    // Greedy picks the most likely token.
    assert.equal(t.top_logprobs[0].token, t.token);
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
  }
});

test('completions.create (legacy) continues a prompt, streaming or not', async (t) => {
  if (skipUnlessCarried(t, 'completions')) return;
  const r = await openai.completions.create({
    model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 0,
  });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.prompt_tokens < 16, `prompt_tokens ${r.usage.prompt_tokens}`);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);

  const stream = await openai.completions.create({
    model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 0, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, r.choices[0].finish_reason);
});

test('a client whose baseURL has no /v1 reaches the same endpoints', async () => {
  const bare = new OpenAI({ baseURL: BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  const want = await openai.chat.completions.create(chatParams({ max_tokens: 4 }));
  const got = await bare.chat.completions.create(chatParams({ max_tokens: 4 }));
  assert.equal(got.object, 'chat.completion');
  assert.equal(got.choices[0].message.content, want.choices[0].message.content);
  const ids = [];
  for await (const m of bare.models.list()) ids.push(m.id);
  assert.ok(ids.includes(MODEL), `models: ${ids}`);
});

test('models.list contains the served alias', async () => {
  const ids = [];
  for await (const m of openai.models.list()) {
    assert.equal(m.object, 'model');
    ids.push(m.id);
  }
  assert.ok(ids.includes(MODEL), `models: ${ids}`);
});

test('an unknown model is a NotFoundError (404) naming it', async () => {
  await assert.rejects(
    openai.chat.completions.create(chatParams({ model: 'no-such-model' })),
    (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, `${e?.constructor?.name}: ${e}`);
      assert.equal(e.status, 404);
      assert.match(e.message, /no-such-model/);
      assert.equal(e.type, 'invalid_request_error');
      return true;
    });
});

test('a prompt longer than the context is a 400 with code context_length_exceeded', async () => {
  const long = 'one two three four '.repeat(1500);  // several thousand tokens; the context is 2048
  await assert.rejects(
    openai.chat.completions.create(chatParams({ messages: [{ role: 'user', content: long }] })),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e}`);
      assert.equal(e.code, 'context_length_exceeded');
      assert.match(e.message, /context/);
      return true;
    });
});

test('temperature 5 is a BadRequestError (400) naming the parameter', async () => {
  await assert.rejects(
    openai.chat.completions.create(chatParams({ temperature: 5 })),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e}`);
      assert.equal(e.status, 400);
      assert.match(e.message, /temperature/);
      assert.equal(e.param, 'temperature');
      return true;
    });
});

test('a client that aborts mid-stream is cancelled and the server stays healthy', async () => {
  const MAX = 1500;
  const { data: stream, response } = await openai.chat.completions
    .create(chatParams({ max_tokens: MAX, ...longRun(7), stream: true }))
    .withResponse();
  const rid = response.headers.get('x-request-id');
  assert.ok(rid, 'no X-Request-ID header');
  let chunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    ++chunks;
    finish = chunk.choices[0]?.finish_reason ?? finish;
    // Chunk 1 carries the role; abort after the first content chunk. The
    // SDK still yields what it had already read, then ends the loop.
    if (chunks === 2) stream.controller.abort();
  }
  assert.ok(stream.controller.signal.aborted);
  assert.equal(finish, null, 'the stream ran to its end despite the abort');
  assert.ok(chunks < MAX, `${chunks} chunks arrived`);

  // The server notices, cancels the sequence and frees its slot (in a chain:
  // the front notices and cancels its upstream call, whose server does).
  const noted = await pollUntil(
    () => serverLogLines(`req=${rid}`).some((l) => l.includes('client disconnected')), 30_000);
  assert.ok(noted, `the server log never says request ${rid} was cancelled as a disconnect`);
  const idle = await pollUntil(async () => (await metric('strata_running_sequences')) === 0, 10_000);
  assert.ok(idle, 'strata_running_sequences did not return to 0');

  const r = await openai.chat.completions.create(chatParams({ max_tokens: 4 }));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 4);
});

test('errors on a streaming request are thrown before any chunk', async () => {
  await assert.rejects(
    openai.chat.completions.create(chatParams({ temperature: 5, stream: true })),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(
    openai.chat.completions.create(chatParams({ model: 'no-such-model', stream: true })),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
});

test('the request id is honoured and reported to the SDK', async () => {
  const { data, request_id } = await openai.chat.completions
    .create(chatParams({ max_tokens: 2 }), { headers: { 'X-Request-ID': 'client-id-openai-1' } })
    .withResponse();
  assert.equal(request_id, 'client-id-openai-1');
  assert.equal(data._request_id, 'client-id-openai-1');
  assert.equal(data.id, 'chatcmpl-client-id-openai-1');
  assert.ok(serverLogLines('[req=client-id-openai-1]').length > 0, 'no log line carries the request id');
});
