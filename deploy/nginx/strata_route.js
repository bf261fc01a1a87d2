// strata_route.js — the key nginx hashes to pick the strata instance of a
// request (njs, loaded by strata.conf: `js_set $strata_route
// strata_route.route;` under `hash $strata_route consistent;`).
//
// The key, first match wins:
//   s:<session_id>   the request body's top-level "session_id" (a string), or
//                    the id in the path of /v1/sessions/<id>: every turn of a
//                    conversation, and reads of it, go to the instance that
//                    holds its KV blocks;
//   p:<sha1 hex>     SHA-1 of the first 1024 bytes (UTF-8) of the prompt:
//                    chat requests (a "messages" array: /v1/chat/completions,
//                    /v1/messages) take the system text first (Anthropic's
//                    top-level "system", OpenAI's "system" and "developer"
//                    messages), then every other message's text in order,
//                    each followed by a newline; completion requests take
//                    "prompt" (a string, or the strings and token ids of an
//                    array). Requests that open with the same long prefix
//                    (a shared system prompt, a conversation resent whole)
//                    land where that prefix is cached. It is hashed so that
//                    no prompt text reaches nginx's logs;
//   r:<request_id>   anything else: GETs, bodies that are not JSON, have no
//                    prompt, or could not be read (see below). nginx's
//                    random $request_id spreads these evenly.
//
// nginx calls this when it picks the upstream peer, which with
// proxy_request_buffering on (the default; strata.conf says so) is after the
// whole body was read, so r.requestText holds it. It is undefined when there
// is no body, and njs throws "request body is in a file" when nginx wrote it
// to a temporary file; strata.conf sets client_body_buffer_size equal to
// client_max_body_size so that a body nginx accepts is always in memory,
// and the throw is caught here anyway. A function that throws would leave
// the variable empty, sending every such request to one instance, so
// nothing below may throw out of route().
//
// The value is computed once per request and cached by nginx: a retry on
// another instance (proxy_next_upstream) walks on along the hash ring from
// the same key.

import crypto from 'crypto';

const kPrefixBytes = 1024;

// The text of one message's content: a string, or the text parts of an
// array of parts (OpenAI {"type": "text", "text"}, Anthropic text blocks).
function contentText(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  for (let i = 0; i < content.length; i++) {
    const part = content[i];
    if (typeof part === 'string') {
      text += part;
    } else if (part && part.type === 'text' && typeof part.text === 'string') {
      text += part.text;
    }
    if (text.length >= kPrefixBytes) break;
  }
  return text;
}

// The prompt's leading text, at least kPrefixBytes bytes of it where the
// prompt has that many ("" when the body has no prompt). A string's length
// never exceeds its UTF-8 byte count, so stopping at kPrefixBytes
// characters always leaves enough bytes to cut from.
function promptLead(body) {
  let lead = '';
  if (Array.isArray(body.messages)) {
    if (body.system !== undefined) lead += contentText(body.system) + '\n';
    const system = (m) => m && (m.role === 'system' || m.role === 'developer');
    const messages = body.messages;
    for (let i = 0; i < messages.length && lead.length < kPrefixBytes; i++) {
      if (system(messages[i])) lead += contentText(messages[i].content) + '\n';
    }
    for (let i = 0; i < messages.length && lead.length < kPrefixBytes; i++) {
      if (messages[i] && !system(messages[i])) lead += contentText(messages[i].content) + '\n';
    }
    return lead;
  }
  const prompt = body.prompt;
  if (typeof prompt === 'string') return prompt.substring(0, kPrefixBytes);
  if (Array.isArray(prompt)) {
    // Several prompts, or one prompt of token ids: their text in order.
    for (let i = 0; i < prompt.length && lead.length < kPrefixBytes; i++) {
      const p = prompt[i];
      lead += (typeof p === 'string' ? p : JSON.stringify(p)) + '\n';
    }
  }
  return lead;
}

// The key of a request whose body is JSON, or "" when it names neither a
// session nor a prompt.
function bodyKey(r) {
  let text;
  try {
    text = r.requestText;
  } catch (e) {
    // The body is in a temporary file: client_body_buffer_size is below
    // client_max_body_size. Said once per request, so a wrong config shows.
    r.warn('strata_route: ' + e.message + '; routing by request id '
           + '(set client_body_buffer_size to client_max_body_size)');
    return '';
  }
  if (typeof text !== 'string' || text.length === 0) return '';
  let body;
  try {
    body = JSON.parse(text);
  } catch (e) {
    return '';  // strata answers it with a 400; any instance can say so
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return '';
  if (typeof body.session_id === 'string' && body.session_id.length > 0) {
    return 's:' + body.session_id;
  }
  const lead = promptLead(body);
  if (lead.length === 0) return '';
  const bytes = Buffer.from(lead, 'utf8').subarray(0, kPrefixBytes);
  return 'p:' + crypto.createHash('sha1').update(bytes).digest('hex');
}

// The session id in the path of /v1/sessions/<id> (and /sessions/<id>).
function pathSession(r) {
  const m = /^(?:\/v1)?\/sessions\/([^/]+)$/.exec(r.uri);
  return m ? m[1] : '';
}

// js_set handler: the routing key of request r (never empty, never throws).
function route(r) {
  let key = '';
  try {
    const id = pathSession(r);
    if (id.length > 0) {
      key = 's:' + id;
    } else if (r.method === 'POST') {
      key = bodyKey(r);
    }
  } catch (e) {
    r.warn('strata_route: ' + e.message + '; routing by request id');
    key = '';
  }
  return key.length > 0 ? key : 'r:' + r.variables.request_id;
}

export default { route };
