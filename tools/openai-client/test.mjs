// The official openai npm client against `sinf-run serve` on loopback:
// a completion, a chat completion and a streamed chat. The script builds a
// .sinf file from the embedded TinyStories model with a small chat template
// (the model ships none), starts the server on a free port, and stops it
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
const template =
  "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}Story:{% endif %}";

let dir, server, client, exited;

before(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "sinf-openai-"));
  const model = path.join(dir, "model");
  cpSync(path.join(root, "testdata", "models", "tinystories-656k"), model, { recursive: true });
  const tcPath = path.join(model, "tokenizer_config.json");
  const tc = JSON.parse(readFileSync(tcPath, "utf8"));
  tc.chat_template = template;
  writeFileSync(tcPath, JSON.stringify(tc));
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
