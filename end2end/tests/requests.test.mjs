// General -> Requests and Admin -> All requests against the mock upstream: the REC-4 filters with
// choices from history, one line per row, a start time that opens the record's detail (full id,
// every field, the routing in words) and a copy button for the id; reading works without
// JavaScript.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser, key;
before(async () => {
  server = await startServer({ mock: true });
  browser = await launchBrowser();
});
after(async () => { await browser?.close(); await server?.stop(); });

/** An account, a key and two calls of different models, made as the admin. */
async function traffic(page) {
  const api = (path, data) => page.request.post(`${server.url}${path}`, { headers: { Origin: server.url }, data });
  const acct = await api('/api/accounts', {
    provider: 'codex', name: 'req-codex', pool_ids: [1],
    credentials: { kind: 'oauth', access_token: 'tok-req', provider_account_id: 'acct-req' },
  });
  assert.equal(acct.status(), 201, await acct.text());
  const made = await api('/api/me/keys', { name: 'e2e-key' });
  key = (await made.json()).secret;
  for (const model of ['gpt-5.1-codex', 'gpt-5.1']) {
    const resp = await fetch(`${server.url}/v1/responses`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, stream: false, input: 'hi' }),
    });
    assert.equal(resp.status, 200, await resp.text());
  }
  // the writer batches records, so they land a few milliseconds after the answers
  for (let i = 0; ; i++) {
    const written = await (await page.request.get(`${server.url}/api/requests`)).json();
    if (written.items.length === 2) break;
    assert.ok(i < 100, `records written: ${written.items.length} of 2`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('filter the table, open a detail, copy the request id', async () => {
  const page = await newPage(browser);
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
  await signIn(page, server.url);
  await traffic(page);
  await page.goto(`${server.url}/admin/requests`);
  await waitForHydration(page);
  const rows = page.getByTestId('requests-table').locator('tbody tr');
  await rows.nth(1).waitFor();
  assert.equal(await rows.count(), 2);
  // one line per row: the routing is a short label, its words in the title
  const routing = rows.first().locator('td').last();
  assert.match((await routing.textContent()).trim(), /^rotation of 1$/);
  assert.match(await routing.getAttribute('title'), /rotation: 1 account left to choose/);

  await page.getByLabel('Model').selectOption('gpt-5.1');
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.waitForURL(/model=gpt-5.1(&|$)/);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="requests-table"] tbody tr').length === 1);
  const id = await rows.first().getAttribute('data-request-id');

  await rows.first().getByRole('link', { name: `Details of ${id}` }).click();
  await page.waitForURL(`${server.url}/admin/requests/${id}`);
  const detail = page.getByTestId('request-detail');
  await detail.waitFor();
  assert.equal((await detail.getByTestId('full-request-id').textContent()).trim(), id);
  assert.match(await detail.getByTestId('routing-words').textContent(), /rotation/);
  await detail.getByRole('button', { name: `Copy request ID ${id}` }).click();
  await detail.getByRole('button', { name: `Copy request ID ${id}` }).getByText('Copied').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), id);
  page.assertNoErrors();
});

test('a member reads their own records and details without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await page.goto(`${server.url}/?outcome=success`);
  const rows = page.getByTestId('requests-table').locator('tbody tr');
  await rows.first().waitFor();
  const id = await rows.first().getAttribute('data-request-id');
  await rows.first().getByRole('link', { name: `Details of ${id}` }).click();
  await page.waitForURL(`${server.url}/requests/${id}`);
  assert.equal((await page.getByTestId('full-request-id').textContent()).trim(), id);
  page.assertNoErrors();
});
