// Admin -> Pools: create a pool, edit a pool's model policy (a mistake is shown beside its field)
// and see a denied model refused through the proxy at once; delete a pool after a confirmation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer({ mock: true }); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

test("a pool's model policy, edited in the app, is enforced on the next request", async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  const headers = { Origin: server.url };
  const account = await page.request.post(`${server.url}/api/accounts`, {
    headers,
    data: { provider: 'openai_api', name: 'openai-key', pool_ids: [1], credentials: { kind: 'api_key', api_key: 'sk-e2e' } },
  });
  assert.equal(account.status(), 201, await account.text());
  const key = await (await page.request.post(`${server.url}/api/me/keys`, { headers, data: { name: 'cli' } })).json();
  const ask = (model) => page.request.post(`${server.url}/v1/responses`, {
    headers: { Authorization: `Bearer ${key.secret}` },
    data: { model, input: 'hi' },
  });
  assert.equal((await ask('gpt-5-mini')).status(), 200);

  await page.goto(`${server.url}/admin/pools`);
  await waitForHydration(page);
  const card = page.getByRole('region', { name: 'default' });
  assert.match(await card.getByTestId('pool-accounts').textContent(), /openai-key/);
  await card.getByLabel('All but those listed').check();
  await card.getByLabel('Listed models (one per line)').fill('gpt-5-mini\nnot a model');
  await card.getByRole('button', { name: 'Save default' }).click();
  await card.locator('[data-field-error="model_policy.models"]').getByText(/"not a model" is not a model id/).waitFor();
  assert.equal((await ask('gpt-5-mini')).status(), 200, 'a refused form changes nothing');

  await card.getByLabel('Listed models (one per line)').fill('gpt-5-mini');
  await card.getByLabel('Aliases (alias = model, one per line)').fill('fast = gpt-5-nano');
  await card.getByRole('button', { name: 'Save default' }).click();
  await page.getByText('Saved default; the next request follows it.').waitFor();
  const denied = await ask('gpt-5-mini');
  assert.equal(denied.status(), 403);
  assert.equal((await denied.json()).error.code, 'model_not_allowed');
  assert.equal((await ask('fast')).status(), 200, 'an alias to an allowed model goes through');
  page.assertNoErrors();
});

test('create a pool and delete it after a confirmation', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await page.goto(`${server.url}/admin/pools`);
  await waitForHydration(page);
  await page.getByLabel('Name', { exact: true }).first().fill('research');
  await page.getByRole('button', { name: 'Create pool' }).click();
  const card = page.getByRole('region', { name: 'research' });
  await card.waitFor();
  await card.getByText('Delete research…').click();
  await card.getByText(/Every API key that targets research is revoked/).waitFor();
  await card.getByRole('button', { name: 'Delete research' }).click();
  await page.getByText('Pool deleted; 0 API keys revoked.').waitFor();
  await card.waitFor({ state: 'detached' });
  page.assertNoErrors();
});
