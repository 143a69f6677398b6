// The Vercel AI SDK's OpenAI-compatible provider, a real client that speaks only Chat Completions
// (editor agents and CLIs build on it), through SubLane to each account family of the mock upstream:
// plain and streamed answers with usage, parallel tool calls, and the tool results sent back.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText, tool } from 'ai';
import { z } from 'zod';
import { startServer, ADMIN_PASSWORD } from '../scripts/test-servers.mjs';

let server;
let provider;

/** The model that reaches each account family, and the mock tokens that may answer it. */
const FAMILIES = {
  codex: { model: 'gpt-5.1-codex', tokens: ['cl-codex'] },
  // a Claude model may also reach the Antigravity account until its model list is read
  claude: { model: 'claude-opus-4-8', tokens: ['cl-claude', 'cl-antigravity'] },
  antigravity: { model: 'gemini-3.1-pro-low', tokens: ['cl-antigravity'] },
};

async function script(tokens, body) {
  for (const token of tokens) {
    const r = await fetch(`${server.mockUrl}/__mock/accounts/${token}`, {
      method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    assert.equal(r.status, 204);
  }
}

before(async () => {
  server = await startServer({ mock: true });
  const signIn = await fetch(`${server.url}/api/session`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Origin: server.url },
    body: JSON.stringify({ username: 'admin', password: ADMIN_PASSWORD }),
  });
  assert.equal(signIn.status, 200, await signIn.text());
  const cookie = signIn.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');
  const api = async (path, data) => {
    const r = await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Origin: server.url, Cookie: cookie },
      body: JSON.stringify(data),
    });
    assert.ok(r.ok, `${path}: ${r.status} ${await r.clone().text()}`);
    return r.json();
  };
  for (const [provider, token, project] of [
    ['codex', 'cl-codex', 'acct-cl'], ['claude', 'cl-claude', null], ['antigravity', 'cl-antigravity', 'proj-cl'],
  ]) {
    const credentials = { kind: 'oauth', access_token: token, ...(project ? { provider_account_id: project } : {}) };
    await api('/api/accounts', { provider, name: token, pool_ids: [1], credentials });
  }
  const { secret } = await api('/api/me/keys', { name: 'ai-sdk' });
  provider = createOpenAICompatible({ name: 'sublane', baseURL: `${server.url}/v1`, apiKey: secret, includeUsage: true });
});

after(async () => server?.stop());

const weather = tool({ description: 'Weather by city', inputSchema: z.object({ city: z.string() }) });

for (const [family, { model, tokens }] of Object.entries(FAMILIES)) {
  test(`${family}: generateText and streamText answer with usage`, async () => {
    const [system, messages] = ['Be brief.', [{ role: 'user', content: 'Say hi' }]];
    const plain = await generateText({ model: provider(model), system, messages, maxRetries: 0 });
    assert.equal(plain.text, 'HelloHelloHello');
    assert.equal(plain.finishReason, 'stop');
    assert.equal(plain.usage.inputTokens, 120);

    const streamed = streamText({ model: provider(model), system, messages, maxRetries: 0 });
    let text = '';
    for await (const piece of streamed.textStream) text += piece;
    assert.equal(text, 'HelloHelloHello');
    assert.equal(await streamed.finishReason, 'stop');
    assert.equal((await streamed.usage).inputTokens, 120);
  });

  test(`${family}: parallel tool calls, and their results sent back`, async () => {
    const calls = [{ name: 'weather', arguments: '{"city":"Paris"}' }, { name: 'weather', arguments: '{"city":"Rome"}' }];
    await script(tokens, { function_calls: calls });
    try {
      const messages = [{ role: 'user', content: 'Weather in Paris and Rome?' }];
      const first = await generateText({ model: provider(model), messages, tools: { weather }, maxRetries: 0 });
      assert.equal(first.finishReason, 'tool-calls');
      assert.deepEqual(first.toolCalls.map((c) => c.input), [{ city: 'Paris' }, { city: 'Rome' }]);

      const streamed = streamText({ model: provider(model), messages, tools: { weather }, maxRetries: 0 });
      const streamedCalls = await streamed.toolCalls;
      assert.deepEqual(streamedCalls.map((c) => c.input), [{ city: 'Paris' }, { city: 'Rome' }]);

      // the SDK writes the calls and their results in its own Chat Completions shape
      await script(tokens, {});
      const results = {
        role: 'tool',
        content: first.toolCalls.map((c) => ({
          type: 'tool-result', toolCallId: c.toolCallId, toolName: c.toolName, output: { type: 'text', value: 'sunny' },
        })),
      };
      const next = await generateText({
        model: provider(model),
        messages: [...messages, ...first.response.messages.filter((m) => m.role === 'assistant'), results],
        tools: { weather },
        maxRetries: 0,
      });
      assert.equal(next.text, 'HelloHelloHello');
    } finally {
      await script(tokens, {});
    }
  });
}
