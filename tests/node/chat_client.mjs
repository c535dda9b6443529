// The Node side of tests/e2e/test_chat_sdk.py: the unchanged `ai` package (installed by
// `make chat` into .cache/chat-node, its version pinned by examples/chat/package-lock.json)
// talks to a live jobstream the way useChat does, and says what it saw as JSON on stdout.
//
//   node chat_client.mjs '{"base": "http://127.0.0.1:8000", "steps": [...]}'
//
// Each step is one of:
//   {"do": "send", "chatId", "messages", "body"?, "headers"?, "hangUpAfterDeltas"?}
//       DefaultChatTransport.sendMessages, read with readUIMessageStream (both validate every
//       part with the SDK's own schema); with hangUpAfterDeltas, the request is aborted after
//       that many text-delta parts, as a closed tab would.
//   {"do": "reconnect", "chatId", "headers"?}   DefaultChatTransport.reconnectToStream
//   {"do": "raw", "method", "path", "body"?, "headers"?}
//       the answer's bytes, its headers, and every `data:` of it parsed by the SDK's
//       parseJsonEventStream with its uiMessageChunkSchema.
// and answers {"chunks", "message", "errors"} (reconnect: null for a 204), or for raw
// {"status", "headers", "frames", "parsed"}.
import { createRequire } from 'node:module';
import path from 'node:path';

const modules = process.env.CHAT_NODE_MODULES;
if (!modules) throw new Error('CHAT_NODE_MODULES: the folder `make chat` installed into');
const require = createRequire(path.join(modules, 'noop.js'));
const {
  DefaultChatTransport,
  readUIMessageStream,
  parseJsonEventStream,
  uiMessageChunkSchema,
} = require('ai');

const plan = JSON.parse(process.argv[2]);

function transport(step) {
  return new DefaultChatTransport({ api: `${plan.base}/api/chat`, headers: step.headers, body: step.body });
}

function describe(error) {
  return { name: error?.name ?? 'Error', message: String(error?.message ?? error) };
}

// The parts as they pass, then the message readUIMessageStream folds them into: the last
// snapshot it yields is the message a client ends with.
async function read(stream, { onDelta } = {}) {
  const chunks = [];
  const errors = [];
  const recorded = stream.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk);
        controller.enqueue(chunk);
        if (chunk.type === 'text-delta') onDelta?.();
      },
    }),
  );
  let message = null;
  for await (const snapshot of readUIMessageStream({
    stream: recorded,
    onError: error => errors.push(describe(error)),
  })) {
    message = snapshot;
  }
  return { chunks, message, errors };
}

async function send(step) {
  const abort = new AbortController();
  let deltas = 0;
  const stream = await transport(step).sendMessages({
    chatId: step.chatId,
    messages: step.messages,
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: abort.signal,
  });
  return read(stream, {
    onDelta: () => {
      deltas += 1;
      if (step.hangUpAfterDeltas != null && deltas >= step.hangUpAfterDeltas) abort.abort();
    },
  });
}

async function reconnect(step) {
  const stream = await transport(step).reconnectToStream({ chatId: step.chatId });
  return stream === null ? null : read(stream);
}

async function raw(step) {
  const response = await fetch(`${plan.base}${step.path}`, {
    method: step.method,
    headers: { 'content-type': 'application/json', ...step.headers },
    body: step.body === undefined ? undefined : JSON.stringify(step.body),
  });
  const text = await response.text();
  const frames = text.split('\n').filter(line => line.startsWith('data: ')).map(line => line.slice(6));
  const parsed = [];
  const bytes = new Blob([text]).stream();
  for await (const result of parseJsonEventStream({ stream: bytes, schema: uiMessageChunkSchema })) {
    parsed.push(result.success ? { success: true, value: result.value } : { success: false, error: describe(result.error), raw: result.rawValue });
  }
  return { status: response.status, headers: Object.fromEntries(response.headers), frames, parsed };
}

const steps = { send, reconnect, raw };
const results = [];
for (const step of plan.steps) {
  try {
    results.push(await steps[step.do](step));
  } catch (error) {
    results.push({ thrown: describe(error) });
  }
}
process.stdout.write(JSON.stringify(results));
