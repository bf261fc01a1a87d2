// Only for a chain (STRATA_CHAIN openai or anthropic): the SDKs talk to a
// strata whose backend is another strata, the upstream at STRATA_ENGINE_URL.
// The front's answers must be the upstream's own, through either API on
// either side, and what the upstream's API cannot carry is refused by name.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import {
  anthropic, CHAIN, engineLogLines, ENGINE_URL, longRun, metric, MODEL, openai, pollUntil,
  PROMPT, serverLogLines,
} from './common.js';

if (CHAIN === 'direct') throw new Error('chain.test.js needs STRATA_CHAIN openai or anthropic');

// The upstream itself, for reference answers.
const upstreamOpenAI = new OpenAI({
  baseURL: `${ENGINE_URL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000,
});
const upstreamAnthropic = new Anthropic({
  baseURL: ENGINE_URL, apiKey: 'unused', maxRetries: 0, timeout: 120_000,
});

// The front's response cache would replay its first answer to the second
// request: each request here goes through to the upstream.
const NO_FRONT_CACHE = { cache: { l1: false } };

const messageParams = (extra = {}) => ({
  model: MODEL,
  max_tokens: 48,
  temperature: 0,
  messages: [{ role: 'user', content: PROMPT }],
  ...NO_FRONT_CACHE,
  ...extra,
});

function textOf(message) {
  assert.equal(message.content.length, 1);
  assert.equal(message.content[0].type, 'text');
  return message.content[0].text;
}

const promptTokens = (u) => u.input_tokens + (u.cache_read_input_tokens ?? 0) +
  (u.cache_creation_input_tokens ?? 0);

test('models.list() on the front lists the backend name', async () => {
  const ids = [];
  for await (const m of openai.models.list()) {
    assert.equal(m.object, 'model');
    ids.push(m.id);
  }
  assert.deepEqual(ids, [MODEL], 'the front serves its one backend and no model of its own');
});

test('an Anthropic SDK stream through the chain gives the non-streaming answer', async () => {
  const whole = await anthropic.messages.create(messageParams());
  const events = [];
  let text = '';
  const stream = anthropic.messages.stream(messageParams());
  stream.on('streamEvent', (e) => events.push(e.type));
  stream.on('text', (delta) => { text += delta; });
  const final = await stream.finalMessage();
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  assert.equal(events.filter((e) => e === 'message_delta').length, 1);
  assert.ok(events.includes('content_block_delta'), `no text delta in ${events}`);
  assert.ok(textOf(whole).length > 0, 'empty reply');
  assert.equal(text, textOf(whole), 'the streamed text differs from the non-streamed');
  assert.equal(textOf(final), text);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(promptTokens(final.usage), promptTokens(whole.usage));
});

test('the front answers as its upstream does, in either API', async () => {
  const chat = {
    model: MODEL, max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: PROMPT }],
  };
  const front = await openai.chat.completions.create({ ...chat, ...NO_FRONT_CACHE });
  const own = await upstreamOpenAI.chat.completions.create(chat);
  assert.equal(front.choices[0].message.content, own.choices[0].message.content);
  assert.equal(front.choices[0].finish_reason, own.choices[0].finish_reason);
  assert.equal(front.usage.prompt_tokens, own.usage.prompt_tokens);
  assert.equal(front.usage.completion_tokens, own.usage.completion_tokens);
  assert.equal(front.usage.total_tokens, own.usage.total_tokens);

  const { cache: _, ...plain } = messageParams({ system: 'You tell short stories.' });
  const frontMessage = await anthropic.messages.create({ ...plain, ...NO_FRONT_CACHE });
  const ownMessage = await upstreamAnthropic.messages.create(plain);
  assert.equal(textOf(frontMessage), textOf(ownMessage));
  assert.equal(frontMessage.stop_reason, ownMessage.stop_reason);
  assert.equal(frontMessage.usage.output_tokens, ownMessage.usage.output_tokens);
  assert.equal(promptTokens(frontMessage.usage), promptTokens(ownMessage.usage));
});

test('a client that walks away from the front is cancelled on the upstream too', async () => {
  const gone = () => engineLogLines('client disconnected').length;
  const before = gone();
  const { data: stream, response } = await openai.chat.completions
    .create({
      model: MODEL, max_tokens: 1500, ...longRun(7), stream: true,
      messages: [{ role: 'user', content: PROMPT }],
    })
    .withResponse();
  const rid = response.headers.get('x-request-id');
  let chunks = 0;
  for await (const _ of stream) {
    if (++chunks === 2) stream.controller.abort();
  }
  assert.ok(stream.controller.signal.aborted);
  const noted = await pollUntil(
    () => serverLogLines(`req=${rid}`).some((l) => l.includes('client disconnected')), 30_000);
  assert.ok(noted, `the front's log never says request ${rid} was cancelled as a disconnect`);
  // The front's own upstream call is the upstream's client: it hangs up.
  const passedOn = await pollUntil(() => gone() > before, 30_000);
  assert.ok(passedOn, 'the upstream never logs the front hanging up on it');
  const idle = await pollUntil(async () => (await metric('strata_running_sequences')) === 0, 10_000);
  assert.ok(idle, "the upstream's strata_running_sequences did not return to 0");
});

test('embeddings pass through an OpenAI backend, and an Anthropic one refuses them', async () => {
  const input = ['Once upon a time', 'there was a cat'];
  if (CHAIN === 'anthropic') {
    await assert.rejects(openai.embeddings.create({ model: MODEL, input }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `${e?.constructor?.name}: ${e}`);
      assert.equal(e.code, 'unsupported_by_backend');
      return true;
    });
    return;
  }
  const front = await openai.embeddings.create({ model: MODEL, input });
  const own = await upstreamOpenAI.embeddings.create({ model: MODEL, input });
  assert.equal(front.data.length, 2);
  for (let i = 0; i < 2; ++i) {
    assert.equal(front.data[i].index, i);
    assert.equal(front.data[i].embedding.length, own.data[i].embedding.length);
    for (let k = 0; k < own.data[i].embedding.length; ++k) {
      assert.ok(Math.abs(front.data[i].embedding[k] - own.data[i].embedding[k]) < 1e-6,
        `input ${i}, component ${k}: ${front.data[i].embedding[k]} vs ${own.data[i].embedding[k]}`);
    }
  }
  assert.equal(front.usage.prompt_tokens, own.usage.prompt_tokens);
});

test('what the Anthropic API cannot carry is a 400 unsupported_by_backend naming it',
  { skip: CHAIN !== 'anthropic' && 'an OpenAI backend carries every field' }, async () => {
    const chat = {
      model: MODEL, max_tokens: 4, temperature: 0, messages: [{ role: 'user', content: PROMPT }],
    };
    const cases = [
      [{ n: 2 }, 'n'],
      [{ seed: 1 }, 'seed'],
      [{ logprobs: true }, 'logprobs'],
      [{ presence_penalty: 0.5 }, 'presence_penalty'],
    ];
    for (const [extra, field] of cases) {
      await assert.rejects(openai.chat.completions.create({ ...chat, ...extra }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, `${field}: ${e?.constructor?.name}: ${e}`);
        assert.equal(e.code, 'unsupported_by_backend', field);
        assert.equal(e.param, field);
        assert.match(e.message, /anthropic/);
        return true;
      });
    }
    await assert.rejects(
      openai.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 4 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'unsupported_by_backend' &&
        e.param === 'prompt');
    // And through the Anthropic SDK, with strata's own sampling fields.
    await assert.rejects(
      anthropic.messages.create(messageParams({ seed: 3 })),
      (e) => e instanceof Anthropic.BadRequestError && /'seed'/.test(e.message));
  });
