// Reads UI message streams with the `ai` npm package's own code, as `useChat` does, and prints
// what it made of each as one JSON line.
//
// Usage: node ai_sdk_reader.mjs PREFIX CASES.json, where PREFIX is the directory `ai` was
// installed into (`npm install --prefix PREFIX ai@7`: outside the repository, in a cache).
//
// CASES.json: a list of cases, each
//   {"url": "http://127.0.0.1:PORT/chat"}  -- POSTed by the AI SDK's DefaultChatTransport (the
//                                              transport useChat uses), or
//   {"bytes": "<base64>"}                   -- a body as it arrived (cut anywhere, say), read by
//                                              the same parser the transport uses, or
//   {"url": ..., "chatId": ID, "leaveAfter": N} -- POSTed, left after N chunks (the page went
//                                              away), then resumed as `useChat({resume: true})`
//                                              does: the transport's reconnectToStream, a GET
//                                              of URL/ID/stream (null: nothing to resume), or
//   {"url": ..., "chatId": ID, "reconnect": true} -- that GET alone.
// Each result: {"message": the last UIMessage, "chunks": the chunk types in order,
//   "finishReason", "errors": texts of the errors the reader reported, "failed": an error that
//   ended the read (null when it read to the end)}.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [prefix, casesFile] = process.argv.slice(2);
const entry = createRequire(join(prefix, 'package.json')).resolve('ai');
const {
  DefaultChatTransport, parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema,
} = await import(pathToFileURL(entry).href);

function bodyStream(bytes) {
  return new ReadableStream({ start(c) { c.enqueue(bytes); c.close(); } });
}

function chunksOf(body) {
  // What DefaultChatTransport.processResponseStream does with a response body.
  return parseJsonEventStream({ stream: body, schema: uiMessageChunkSchema }).pipeThrough(
    new TransformStream({ transform(parsed, c) {
      if (!parsed.success) throw parsed.error;
      c.enqueue(parsed.value);
    } }),
  );
}

async function read(chunks) {
  const seen = [];
  let finishReason = null;
  const watched = chunks.pipeThrough(new TransformStream({ transform(chunk, c) {
    seen.push(chunk.type);
    if (chunk.type === 'finish') finishReason = chunk.finishReason ?? null;
    c.enqueue(chunk);
  } }));
  const errors = [];
  let message = null;
  let failed = null;
  try {
    for await (const m of readUIMessageStream({ stream: watched, onError: e => errors.push(String(e.message ?? e)) })) {
      message = m;
    }
  } catch (e) {
    failed = String(e.message ?? e);
  }
  return { message, chunks: seen, finishReason, errors, failed };
}

const NOTHING = { message: null, chunks: [], finishReason: null, errors: [], failed: null };
const userMessages = prompt => [
  { id: 'u1', role: 'user', parts: [{ type: 'text', text: prompt ?? 'hi' }] }];

async function leaveAndResume(item) {
  const transport = new DefaultChatTransport({ api: item.url });
  if (!item.reconnect) {
    const leave = new AbortController();
    const chunks = await transport.sendMessages({
      chatId: item.chatId, trigger: 'submit-message', messageId: undefined,
      messages: userMessages(item.prompt), abortSignal: leave.signal,
    });
    const reader = chunks.getReader();
    for (let i = 0; i < item.leaveAfter; i++) await reader.read();
    leave.abort();
    await reader.cancel().catch(() => {});
  }
  const resumed = await transport.reconnectToStream({ chatId: item.chatId });
  return resumed === null ? { ...NOTHING, resumed: false } : { ...(await read(resumed)), resumed: true };
}

const cases = JSON.parse(readFileSync(casesFile, 'utf8'));
for (const item of cases) {
  let result;
  if (item.chatId) {
    try {
      result = await leaveAndResume(item);
    } catch (e) {
      result = { ...NOTHING, failed: String(e.message ?? e) };
    }
  } else if (item.url) {
    const transport = new DefaultChatTransport({ api: item.url });
    let chunks;
    try {
      chunks = await transport.sendMessages({
        chatId: 'chat', trigger: 'submit-message', messageId: undefined,
        messages: userMessages(item.prompt), abortSignal: undefined,
      });
      result = await read(chunks);
    } catch (e) {
      result = { ...NOTHING, failed: String(e.message ?? e) };
    }
  } else {
    result = await read(chunksOf(bodyStream(Buffer.from(item.bytes, 'base64'))));
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}
