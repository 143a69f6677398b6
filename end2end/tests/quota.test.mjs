// Admin -> Accounts against the mock upstream: quota rows with pace bars (UI-3, PACE). Opening
// the page reads the quota of an account with no data yet; the row shows the share used, the
// even-pace marker, the pace in words, and a note that opens (also without JavaScript).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer({ mock: true }); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

/** A Codex account whose usage read says: 5-hour window half gone, `used` % used. */
async function paceAccount(page, name, used) {
  const now = Math.floor(Date.now() / 1000);
  const quota = {
    plan_type: 'plus',
    rate_limit: {
      allowed: true, limit_reached: false,
      primary_window: { used_percent: used, limit_window_seconds: 18000, reset_at: now + 9000 },
      secondary_window: { used_percent: 10, limit_window_seconds: 604800, reset_at: now + 302400 },
    },
  };
  const scripted = await page.request.put(`${server.mockUrl}/__mock/accounts/tok-${name}`, { data: { quota } });
  assert.equal(scripted.status(), 204);
  const resp = await page.request.post(`${server.url}/api/accounts`, {
    headers: { Origin: server.url },
    data: { provider: 'codex', name, pool_ids: [1], credentials: { kind: 'oauth', access_token: `tok-${name}`, provider_account_id: `acct-${name}` } },
  });
  assert.equal(resp.status(), 201, await resp.text());
}

test('a quota row shows its pace bar, the pace in words, and the note opens', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await paceAccount(page, 'pace-ahead', 70);
  await page.goto(`${server.url}/admin/accounts`);
  await waitForHydration(page);
  const card = page.getByRole('article', { name: 'pace-ahead' });
  const row = card.locator('[data-testid="quota-row"][data-label="5-hour"]');
  await row.waitFor();
  const meter = row.getByRole('meter', { name: '5-hour: 70 % used' });
  assert.equal(await meter.getAttribute('aria-valuenow'), '70');
  assert.equal(await row.getByTestId('pace-marker').count(), 1);
  assert.equal((await row.getByTestId('pace').textContent()).trim(), '+20 points faster than even pace');
  assert.match(await row.textContent(), /resets .*observed just now/);
  const note = card.getByTestId('pace-note');
  assert.equal(await note.getByText(/informational, not a forecast/).isVisible(), false);
  await note.getByText('What does pace mean?').click();
  assert.equal(await note.getByText(/informational, not a forecast/).isVisible(), true);
  // Refresh quota reads again (the button is a form; the rows come back)
  await page.getByRole('button', { name: 'Refresh quota' }).click();
  await page.getByRole('button', { name: 'Refresh quota' }).waitFor();
  await row.waitFor();
  page.assertNoErrors();
});

test('quota rows are readable without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await paceAccount(page, 'pace-nojs', 30);
  await page.goto(`${server.url}/admin/accounts`);
  const row = page.getByRole('article', { name: 'pace-nojs' }).locator('[data-testid="quota-row"][data-label="5-hour"]');
  await row.waitFor();
  assert.equal((await row.getByTestId('pace').textContent()).trim(), '20 points slower than even pace');
  const card = page.getByRole('article', { name: 'pace-nojs' });
  await card.getByText('What does pace mean?').click();
  await card.getByText(/informational, not a forecast/).waitFor();
  page.assertNoErrors();
});
