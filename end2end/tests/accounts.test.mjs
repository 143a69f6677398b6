// Admin -> Accounts: a card per account with its state, load and scheduling settings; the
// ACC-3 actions change what the card shows, with JavaScript and without it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

async function addAccount(page, name) {
  const resp = await page.request.post(`${server.url}/api/accounts`, {
    headers: { Origin: server.url },
    data: { provider: 'codex', name, pool_ids: [1], credentials: { kind: 'oauth', access_token: `tok-${name}` } },
  });
  assert.equal(resp.status(), 201, await resp.text());
}

test('account cards show state and the actions change it', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await addAccount(page, 'e2e-codex');
  await page.goto(`${server.url}/admin/accounts`);
  await waitForHydration(page);
  const card = page.getByRole('article', { name: 'e2e-codex' });
  await card.waitFor();
  assert.equal((await card.getByTestId('load').textContent()).trim(), '0 / 30 in flight');
  assert.match(await card.getByTestId('badges').textContent(), /active/);

  // scheduling settings: a new concurrency limit
  await card.getByLabel('Concurrency limit').fill('7');
  await card.getByRole('button', { name: 'Save' }).click();
  await card.getByText('0 / 7 in flight').waitFor();

  // the manual switch and enable/disable, each reflected in the badges
  await card.getByRole('button', { name: 'Stop scheduling: e2e-codex' }).click();
  await card.getByText('not scheduling').waitFor();
  await card.getByRole('button', { name: 'Disable: e2e-codex' }).click();
  await card.getByText('disabled', { exact: true }).waitFor();
  await card.getByRole('button', { name: 'Enable: e2e-codex' }).click();
  await card.getByText('active', { exact: true }).waitFor();
  await card.getByRole('button', { name: 'Resume scheduling: e2e-codex' }).click();
  await card.getByRole('button', { name: 'Stop scheduling: e2e-codex' }).waitFor();
  assert.equal(await card.getByText('not scheduling').count(), 0);
  page.assertNoErrors();
});

test('the accounts page reads and acts without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await addAccount(page, 'nojs-codex');
  await page.goto(`${server.url}/admin/accounts`);
  const card = page.getByRole('article', { name: 'nojs-codex' });
  await card.waitFor();
  await card.getByRole('button', { name: 'Stop scheduling: nojs-codex' }).click();
  // the form post redirects back to the page (leptos adds an empty query)
  await page.waitForURL(/\/admin\/accounts\??$/);
  await page.getByRole('article', { name: 'nojs-codex' }).getByText('not scheduling').waitFor();
  page.assertNoErrors();
});

test('the page follows the live state and never overwrites what is being typed', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await addAccount(page, 'live-codex');
  await page.goto(`${server.url}/admin/accounts`);
  await waitForHydration(page);
  const card = () => page.getByRole('article', { name: 'live-codex' });
  await card().waitFor();
  const id = await card().getAttribute('data-account-id');
  const act = (what) => page.request.post(`${server.url}/api/accounts/${id}/${what}`, { headers: { Origin: server.url }, data: {} });
  // a change made elsewhere shows without a reload
  assert.equal((await act('disable')).status(), 200);
  await card().getByText('disabled', { exact: true }).waitFor({ timeout: 12000 });
  // typing pauses the refresh: the typed value stays
  await card().getByLabel('Concurrency limit').fill('9');
  assert.equal((await act('enable')).status(), 200);
  await page.waitForTimeout(6500);
  assert.equal(await card().getByLabel('Concurrency limit').inputValue(), '9');
  assert.equal(await card().getByText('disabled', { exact: true }).count(), 1, 'not refreshed while edited');
  page.assertNoErrors();
});
