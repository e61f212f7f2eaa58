// The official openai npm client against `sinf-run serve` on loopback:
// a completion, a chat completion and a streamed chat, logprobs,
// structured output and a tool round trip. The script builds a .sinf file from the embedded
// TinyStories model with a small chat template (the model ships none) and
// JSON's braces and brackets and '/' as tokens (its vocabulary has none: the last
// ids' pieces are replaced), starts the server on a free port, and stops it
// with SIGTERM at the end, checking that it exits cleanly.
//
//   make build && (cd tools/openai-client && npm ci && npm test)
//
// SINF_BIN (default ../../bin) holds sinf and sinf-run.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, cpSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const bin = process.env.SINF_BIN ?? path.join(root, "bin");
// role: content lines, with tools and tool calls written as Qwen's templates write them (Hermes <tool_call>)
const template =
  "{% if tools %}tools:{% for t in tools %} {{ t.function.name }}{% endfor %}{{ '\\n' }}{% endif %}" +
  "{% for m in messages %}{{ m.role }}: {% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ '\\n' }}" +
  "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}{{ '\\n' }}</tool_call>{% endfor %}" +
  "{% else %}{{ m.content }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}Story:{% endif %}";

let dir, server, client, exited;

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "sinf-openai-"));
  const model = path.join(dir, "model");
  cpSync(path.join(root, "testdata", "models", "tinystories-656k"), model, { recursive: true });
  const tcPath = path.join(model, "tokenizer_config.json");
  const tc = JSON.parse(readFileSync(tcPath, "utf8"));
  tc.chat_template = template;
  writeFileSync(tcPath, JSON.stringify(tc));
  const tjPath = path.join(model, "tokenizer.json");
  const tj = JSON.parse(readFileSync(tjPath, "utf8"));
  const vocab = tj.model.vocab, byId = new Map(Object.entries(vocab).map(([k, id]) => [id, k]));
  const gone = new Set();
  ["{", "}", "[", "]", '{"', '":', '","', '"}', "true", "false", "null", "/"].forEach((piece, i) => {
    const id = 2036 + i;
    gone.add(byId.get(id));
    delete vocab[byId.get(id)];
    vocab[piece] = id;
  });
  tj.model.merges = tj.model.merges.filter((m) => {
    const [a, b] = Array.isArray(m) ? m : m.split(" ");
    return !gone.has(a) && !gone.has(b) && !gone.has(a + b);
  });
  writeFileSync(tjPath, JSON.stringify(tj));
  const file = path.join(dir, "ts.sinf");
  execFileSync(path.join(bin, "sinf"), ["convert", "--model", model, "--random", "--gamma", "0.7",
    "--first-layer", "0", "--last-layer", "2", "--out", file], { stdio: "ignore" });
  server = spawn(path.join(bin, "sinf-run"), ["serve", "--model", file, "--port", "0", "--threads", "1", "--api-key", "test-key"],
    { stdio: ["ignore", "ignore", "pipe"] });
  exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    let log = "";
    server.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve(m[1]);
    });
    server.on("exit", () => reject(new Error("sinf-run serve exited: " + log)));
  });
  client = new OpenAI({ baseURL: url + "/v1", apiKey: "test-key", maxRetries: 0 });
});

after(async () => {
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    const { code } = await exited;
    assert.equal(code, 0, "sinf-run serve exits 0 on SIGTERM");
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("models lists the served file", async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), ["ts"]);
});

test("completion", async () => {
  const r = await client.completions.create({ model: "ts", prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.ok(r.choices[0].text.length > 0);
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason));
  assert.equal(r.usage.prompt_tokens, 6); // BOS + "Once upon a time"
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("chat completion, then the same streamed", async () => {
  const messages = [{ role: "user", content: "Tell me a story" }];
  const r = await client.chat.completions.create({ model: "ts", messages, max_tokens: 12, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  const text = r.choices[0].message.content;
  assert.ok(text.length > 0);

  const stream = await client.chat.completions.create({
    model: "ts", messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let streamed = "", finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      role ??= c.delta.role ?? null;
      streamed += c.delta.content ?? "";
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(role, "assistant");
  assert.equal(streamed, text, "the streamed deltas add up to the non-streamed reply (greedy)");
  assert.equal(finish, r.choices[0].finish_reason);
  assert.deepEqual(usage, r.usage);
});

test("errors are OpenAI errors", async () => {
  await assert.rejects(
    client.completions.create({ model: "ts", prompt: "x", n: 2 }),
    (e) => e.status === 400 && /n = 1/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: "gpt-4", prompt: "x" }),
    (e) => e.status === 404 && e.code === "model_not_found",
  );
  const noKey = new OpenAI({ baseURL: client.baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(noKey.models.list(), (e) => e.status === 401);
});

test("logprobs, chat and completions", async () => {
  const messages = [{ role: "user", content: "Tell me a story" }];
  const r = await client.chat.completions.create({ model: "ts", messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  const eos = r.choices[0].finish_reason === "stop" ? 1 : 0;
  assert.equal(content.length, r.usage.completion_tokens - eos, "one entry per generated token");
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.logprob, e.top_logprobs[0].logprob, "greedy picks the most likely");
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, "utf8")]);
  }
  const c = await client.completions.create({ model: "ts", prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 3 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, lp.token_logprobs.length);
  assert.equal(lp.tokens.length, lp.top_logprobs.length);
  assert.ok(lp.top_logprobs.every((t) => Object.keys(t).length <= 3));
  assert.ok(lp.text_offset.every((o, i) => i === 0 || o >= lp.text_offset[i - 1]));
});

test("structured output: json_schema and json_object", async () => {
  const schema = {
    type: "object",
    properties: {
      color: { enum: ["red", "blue"] },
      n: { type: "integer" },
      ok: { type: "boolean" },
      xs: { type: "array", items: { type: "number" }, maxItems: 3 },
    },
    required: ["color", "n", "ok", "xs"],
    additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model: "ts", messages: [{ role: "user", content: "JSON please" }], max_tokens: 1000, temperature: 0.8, seed: 1,
    response_format: { type: "json_schema", json_schema: { name: "thing", strict: true, schema } },
  });
  assert.equal(r.choices[0].finish_reason, "stop", "the document ends with the model's end token");
  const doc = JSON.parse(r.choices[0].message.content);
  assert.deepEqual(Object.keys(doc).sort(), ["color", "n", "ok", "xs"]);
  assert.ok(["red", "blue"].includes(doc.color));
  assert.ok(Number.isInteger(doc.n));
  assert.equal(typeof doc.ok, "boolean");
  assert.ok(Array.isArray(doc.xs) && doc.xs.length <= 3 && doc.xs.every((x) => typeof x === "number"));

  const o = await client.completions.create({ model: "ts", prompt: "Once upon a time", max_tokens: 30, temperature: 0, response_format: { type: "json_object" } });
  assert.match(o.choices[0].text, /^\s*\{/);
  await assert.rejects(
    client.chat.completions.create({ model: "ts", messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "t", schema: { type: "string", pattern: "a+" } } } }),
    (e) => e.status === 400 && /pattern/.test(e.message),
  );
});

test("tools: a forced call, unstreamed and streamed, then the round trip with its result", async () => {
  const tools = [{
    type: "function",
    function: {
      name: "get_weather", description: "the weather in a city",
      parameters: { type: "object", properties: { city: { enum: ["Oslo", "Paris"] }, days: { type: "integer" } }, required: ["city", "days"], additionalProperties: false },
    },
  }];
  const messages = [{ role: "user", content: "Weather in Oslo?" }];
  const r = await client.chat.completions.create({
    model: "ts", messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 600, temperature: 0,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  const args = JSON.parse(call.function.arguments);
  assert.ok(["Oslo", "Paris"].includes(args.city));
  assert.ok(Number.isInteger(args.days));

  // streamed: the SDK's accumulator (ChatCompletionStream) rebuilds the same call from the deltas
  const stream = client.chat.completions.stream({
    model: "ts", messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 600, temperature: 0,
  });
  const names = [];
  stream.on("tool_calls.function.arguments.done", (e) => names.push(e.name));
  const streamed = (await stream.finalChatCompletion()).choices[0];
  assert.equal(streamed.finish_reason, "tool_calls");
  assert.equal(streamed.message.tool_calls.length, 1);
  assert.equal(streamed.message.tool_calls[0].function.name, "get_weather");
  assert.equal(streamed.message.tool_calls[0].function.arguments, call.function.arguments);
  assert.deepEqual(names, ["get_weather"]);

  const back = await client.chat.completions.create({
    model: "ts", tools, max_tokens: 6, temperature: 0,
    messages: [...messages, choice.message, { role: "tool", tool_call_id: call.id, content: "sunny, 21 C" }],
  });
  assert.ok(back.usage.prompt_tokens > r.usage.prompt_tokens, "the call and its result are in the prompt");
  assert.ok(["stop", "length", "tool_calls"].includes(back.choices[0].finish_reason));
});
