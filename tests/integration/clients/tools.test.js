// Tool calling with the official SDKs' own tool flows: OpenAI's runTools
// (whole and streamed) and its stream helper, Anthropic's tool-use loop
// (create, run the tool, send its tool_result) and its message stream with
// input_json_delta. The test model is random or tiny and never chooses to
// call a tool itself, so each flow forces the call (tool_choice required or
// a named tool): strata holds the answer to calls of the offered tools whose
// arguments follow the tool's schema, whatever the model, on the local
// engine and through either upstream API.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { anthropic, MODEL, openai, skipUnlessCarried } from './common.js';

const WEATHER_SCHEMA = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 12 },
    unit: { enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer' },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};

function checkWeatherArgs(args) {
  assert.equal(typeof args, 'object');
  assert.deepEqual(Object.keys(args).filter((k) => !['city', 'unit', 'days'].includes(k)), []);
  assert.equal(typeof args.city, 'string');
  assert.ok(args.city.length <= 12, `city '${args.city}' is longer than maxLength`);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit), `unit ${args.unit}`);
  if ('days' in args) assert.ok(Number.isInteger(args.days), `days ${args.days}`);
}

const openaiTools = [
  {
    type: 'function',
    function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER_SCHEMA },
  },
  {
    type: 'function',
    function: { name: 'get_time', description: 'The time now', parameters: { type: 'object', properties: {} } },
  },
];

const question = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('OpenAI: a named tool_choice answers with that call, arguments per its schema', async () => {
  const c = await openai.chat.completions.create({
    model: MODEL, messages: question, tools: openaiTools, max_tokens: 200, temperature: 1,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
  });
  const choice = c.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, 'get_weather');
  checkWeatherArgs(JSON.parse(call.function.arguments));
});

test('OpenAI: runTools calls the function with the parsed arguments and sends its result', async () => {
  const seen = [];
  const runner = openai.chat.completions.runTools({
    model: MODEL, messages: question, max_tokens: 200, temperature: 1,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', parameters: WEATHER_SCHEMA, parse: JSON.parse,
        function: (args) => { seen.push(args); return { temperature: 21 }; },
      },
    }],
  });
  await runner.done();
  assert.equal(seen.length, 1);
  checkWeatherArgs(seen[0]);
  const messages = runner.messages;
  const call = messages.find((m) => m.role === 'assistant' && m.tool_calls?.length);
  const result = messages.find((m) => m.role === 'tool');
  assert.ok(call && result, JSON.stringify(messages));
  assert.equal(result.tool_call_id, call.tool_calls[0].id);
  assert.equal(result.content, '{"temperature":21}');
  // The conversation with the call and its result is a valid next request.
  const next = await openai.chat.completions.create({
    model: MODEL, messages, tools: openaiTools, tool_choice: 'none', max_tokens: 8, temperature: 0,
  });
  assert.equal(next.choices[0].message.tool_calls, undefined);
  assert.equal(typeof next.choices[0].message.content, 'string');
});

test('OpenAI: streamed runTools and the stream helper assemble the calls from their pieces', async () => {
  const seen = [];
  const runner = openai.chat.completions.runTools({
    model: MODEL, messages: question, max_tokens: 200, temperature: 1, stream: true,
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false,
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', parameters: WEATHER_SCHEMA, parse: JSON.parse,
        function: (args) => { seen.push(args); return 'sunny'; },
      },
    }],
  });
  await runner.done();
  assert.equal(seen.length, 1);
  checkWeatherArgs(seen[0]);

  // tool_choice "required": any of the tools; several calls may come.
  const stream = openai.chat.completions.stream({
    model: MODEL, messages: question, tools: openaiTools, tool_choice: 'required', max_tokens: 300,
    temperature: 1,
  });
  let pieces = 0;
  stream.on('chunk', (chunk) => {
    for (const c of chunk.choices) pieces += c.delta?.tool_calls?.length ?? 0;
  });
  const final = await stream.finalChatCompletion();
  const choice = final.choices[0];
  assert.ok(choice.message.tool_calls.length >= 1);
  assert.ok(pieces > choice.message.tool_calls.length, 'the arguments came in pieces');
  const ids = new Set();
  for (const call of choice.message.tool_calls) {
    ids.add(call.id);
    assert.ok(['get_weather', 'get_time'].includes(call.function.name), call.function.name);
    // A call cut by max_tokens is a prefix; every complete one parses.
    if (choice.finish_reason === 'tool_calls') {
      const args = JSON.parse(call.function.arguments);
      if (call.function.name === 'get_weather') checkWeatherArgs(args);
      else assert.deepEqual(args, {});
    }
  }
  assert.equal(ids.size, choice.message.tool_calls.length, 'call ids are distinct');
  assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), choice.finish_reason);
});

const anthropicTools = [
  { name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER_SCHEMA },
];

test('Anthropic: the tool-use loop: a forced tool_use, its tool_result, the next turn', async () => {
  const first = await anthropic.messages.create({
    model: MODEL, max_tokens: 200, messages: question, tools: anthropicTools,
    tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
  });
  assert.equal(first.stop_reason, 'tool_use');
  const uses = first.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, 'get_weather');
  checkWeatherArgs(uses[0].input);
  // Run the tool and send its result back, as the SDK's docs loop does.
  const next = await anthropic.messages.create({
    model: MODEL, max_tokens: 8, temperature: 0, tools: anthropicTools,
    messages: [
      ...question,
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: '21 C' }] },
    ],
    tool_choice: { type: 'none' },
  });
  assert.equal(next.content[0].type, 'text');
  assert.ok(['end_turn', 'max_tokens'].includes(next.stop_reason), next.stop_reason);
});

test('Anthropic: a streamed tool_use block carries its input as input_json_delta pieces', async () => {
  const stream = anthropic.messages.stream({
    model: MODEL, max_tokens: 200, messages: question, tools: anthropicTools,
    tool_choice: { type: 'any', disable_parallel_tool_use: true },
  });
  let json = '';
  let starts = 0;
  stream.on('inputJson', (partial) => { json += partial; });
  stream.on('streamEvent', (e) => {
    if (e.type === 'content_block_start' && e.content_block.type === 'tool_use') starts += 1;
  });
  const final = await stream.finalMessage();
  assert.equal(starts, 1);
  assert.equal(final.stop_reason, 'tool_use');
  const use = final.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(final.content));
  checkWeatherArgs(use.input);
  assert.deepEqual(JSON.parse(json), use.input);
  // No empty text block ahead of the call.
  assert.ok(!final.content.some((b) => b.type === 'text' && b.text === ''), JSON.stringify(final.content));
});

test('a schema the decoder cannot enforce is a 400 naming the tool and the keyword', async () => {
  const bad = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'number', multipleOf: 3 } } } } }];
  await assert.rejects(
    openai.chat.completions.create({ model: MODEL, messages: question, tools: bad, tool_choice: 'required', max_tokens: 8 }),
    (e) => e.status === 400 && /multipleOf/.test(e.message) && /tools\[0\]/.test(e.message),
  );
  await assert.rejects(
    openai.chat.completions.create({ model: MODEL, messages: question, tools: openaiTools, tool_choice: { type: 'function', function: { name: 'nope' } }, max_tokens: 8 }),
    (e) => e.status === 400 && /nope/.test(e.message),
  );
});

// Constrained decoding is one more deterministic step after the logits: a
// seeded forced call is the same alone, beside other requests in one batch,
// and again once its prompt's KV blocks are cached (L1 is off, so each is
// generated).
test('a seeded forced call is the same alone, in a batch and from the prefix cache', async (t) => {
  if (skipUnlessCarried(t, 'seed', 'reproducible sampling')) return;
  const ask = (seed) => openai.chat.completions.create({
    model: MODEL, messages: question, tools: openaiTools, tool_choice: 'required', max_tokens: 120,
    temperature: 1, seed, cache: { l1: false },
  });
  const show = (c) => JSON.stringify([c.choices[0].finish_reason, c.choices[0].message.tool_calls]);
  const alone = show(await ask(7));
  const batch = await Promise.all([ask(7), ask(8), ask(9), ask(10)]);
  assert.equal(show(batch[0]), alone);
  assert.equal(show(await ask(7)), alone);
  assert.notEqual(show(batch[1]), alone, 'another seed samples other calls');
});

// response_format json_schema: on the local engine the decoding is held to
// the schema; through an Anthropic upstream it is that API's forced tool
// use, whose input comes back as the answer's text. Either way the text
// parses and validates, whatever the model.
test('a json_schema answer parses and follows its schema, streamed or not', async () => {
  const params = {
    model: MODEL, messages: question, max_tokens: 200, temperature: 1,
    response_format: { type: 'json_schema', json_schema: { name: 'weather', schema: WEATHER_SCHEMA, strict: true } },
  };
  const whole = await openai.chat.completions.create(params);
  assert.equal(whole.choices[0].finish_reason, 'stop');
  assert.equal(whole.choices[0].message.tool_calls, undefined);
  checkWeatherArgs(JSON.parse(whole.choices[0].message.content));
  const stream = openai.chat.completions.stream(params);
  const final = await stream.finalChatCompletion();
  checkWeatherArgs(JSON.parse(final.choices[0].message.content));
});
