// General -> Usage and Admin -> Workspace usage (BEY-1) against the mock upstream: the charts are
// SVG rendered by the server, readable without JavaScript; hydrated, a focused bar has its values
// spelled out; the table's rows are what the CSV download holds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => {
  server = await startServer({ mock: true });
  browser = await launchBrowser();
  const page = await newPage(browser);
  await signIn(page, server.url);
  const api = (path, data) => page.request.post(`${server.url}${path}`, { headers: { Origin: server.url }, data });
  const acct = await api('/api/accounts', {
    provider: 'codex', name: 'usage-codex', pool_ids: [1],
    credentials: { kind: 'oauth', access_token: 'tok-usage', provider_account_id: 'acct-usage' },
  });
  assert.equal(acct.status(), 201, await acct.text());
  const key = (await (await api('/api/me/keys', { name: 'usage-key' })).json()).secret;
  for (const model of ['gpt-5.1-codex', 'gpt-5.1-codex', 'gpt-5.1']) {
    const resp = await fetch(`${server.url}/v1/responses`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model, stream: false, store: false, input: 'hi' }),
    });
    assert.equal(resp.status, 200, await resp.text());
  }
  // the summaries are written with the records, a few milliseconds later
  for (let i = 0; i < 50; i++) {
    const usage = await (await page.request.get(`${server.url}/api/me/usage`)).json();
    if (usage.totals.requests === 3) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  await page.close();
});
after(async () => { await browser?.close(); await server?.stop(); });

test('the charts render without JavaScript, with names for every mark', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await page.goto(`${server.url}/usage`);
  for (const id of ['usage-requests', 'usage-tokens', 'usage-errors', 'usage-models']) {
    const chart = page.locator(`[data-chart="${id}"] svg[role="group"]`);
    await chart.waitFor();
    assert.equal(await chart.getAttribute('aria-labelledby'), `${id}-title`);
    assert.equal(await chart.getAttribute('aria-describedby'), `${id}-desc`);
  }
  // seven days, the last one today with the three calls
  const days = page.locator('[data-chart="usage-requests"] svg g[role="img"]');
  assert.equal(await days.count(), 7);
  assert.match(await days.last().getAttribute('aria-label'), /: 3 requests, 3 succeeded, 0 failed/);
  const models = page.getByRole('img', { name: /^gpt-5\.1-codex: 2 requests/ });
  assert.equal(await models.count(), 1);
  assert.match(await page.getByTestId('usage-totals').textContent(), /Requests\s*3/);
  const rows = page.getByTestId('usage-table').locator('tbody tr');
  assert.equal(await rows.count(), 2);
  page.assertNoErrors();
});

test('hydrated, a focused bar says its values; the CSV holds the table', async () => {
  const page = await newPage(browser, { acceptDownloads: true });
  await signIn(page, server.url);
  await page.goto(`${server.url}/admin/usage?days=30`);
  await waitForHydration(page);
  const days = page.locator('[data-chart="usage-requests"] svg g[role="img"]');
  assert.equal(await days.count(), 30);
  // a chart is one Tab stop, on its latest day; the arrow keys move along the days
  assert.equal(await page.locator('[data-chart="usage-requests"] [tabindex="0"]').count(), 1);
  assert.equal(await days.last().getAttribute('tabindex'), '0');
  await days.last().focus();
  const readout = page.locator('[data-chart="usage-requests"] [aria-live="polite"]');
  await readout.getByText(/3 requests, 3 succeeded/).waitFor();
  await page.keyboard.press('ArrowLeft');
  await readout.getByText(/: 0 requests/).waitFor();
  assert.equal(await days.nth(28).evaluate((e) => e === document.activeElement), true);
  assert.equal(await days.nth(28).getAttribute('tabindex'), '0');
  await page.keyboard.press('End');
  await readout.getByText(/3 requests, 3 succeeded/).waitFor();
  await page.locator('[data-chart="usage-models"] g[role="img"]').first().hover();
  await page.locator('[data-chart="usage-models"] [aria-live="polite"]').getByText(/^gpt-5\.1-codex: 2 requests/).waitFor();

  // filter by model in place
  await page.getByLabel('Model', { exact: true }).selectOption('gpt-5.1');
  await page.getByRole('button', { name: 'Show' }).click();
  await page.waitForURL(/model=gpt-5\.1(&|$)/);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="usage-table"] tbody tr').length === 1);

  const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('usage-csv').click()]);
  assert.equal(download.suggestedFilename(), 'sublane-usage-30d.csv');
  const lines = (await readFile(await download.path(), 'utf8')).trim().split('\n');
  assert.equal(lines[0], 'day,model,requests,succeeded,incomplete,errors,cancelled,rejected,input_tokens,output_tokens,cached_tokens,mean_duration_ms,mean_first_output_ms');
  assert.equal(lines.length, 2, 'the CSV has the rows the filtered table shows');
  const cells = lines[1].split(',');
  const row = page.getByTestId('usage-table').locator('tbody tr').first().locator('td');
  assert.equal(cells[0], (await row.nth(0).textContent()).trim());
  assert.equal(cells[1], 'gpt-5.1');
  assert.equal(cells[2], (await row.nth(2).textContent()).trim());
  page.assertNoErrors();
});
