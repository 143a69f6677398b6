// Admin -> Settings: workspace settings changed in the app, applied without a restart, each saying
// where its value comes from; "Use default" hands one back. With JavaScript and without.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

async function current(page, name) {
  const resp = await page.request.get(`${server.url}/api/settings`);
  return (await resp.json()).find((s) => s.name === name);
}

test('change a workspace setting and hand it back to its default', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await page.goto(`${server.url}/admin/settings`);
  await waitForHydration(page);
  const row = page.locator('[data-setting="queue_timeout"]');
  assert.equal((await row.getByTestId('source').textContent()).trim(), 'built-in default');
  await page.getByLabel('Queue timeout').fill('45');
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.getByText('Saved; in force from the next request.').waitFor();
  await row.getByText('set here').waitFor();
  assert.deepEqual([(await current(page, 'queue_timeout')).value, (await current(page, 'queue_timeout')).source], [45, 'database']);
  assert.equal((await current(page, 'queue_capacity')).source, 'default', 'untouched settings stay where they were');

  // out of range: refused, named, nothing stored
  await page.getByLabel('Queue capacity per pool').evaluate((el) => { el.removeAttribute('max'); el.value = '99999'; });
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.getByRole('alert').getByText(/queue_capacity/).waitFor();
  assert.equal((await current(page, 'queue_capacity')).source, 'default');

  await page.reload();
  await waitForHydration(page);
  await page.getByLabel('Use default for Queue timeout').check();
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.locator('[data-setting="queue_timeout"]').getByText('built-in default').waitFor();
  assert.equal((await current(page, 'queue_timeout')).value, 30);
  page.assertNoErrors();
});

test('the settings form works without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await page.goto(`${server.url}/admin/settings`);
  await page.getByLabel('Failure threshold (0 disables model cooldowns)').fill('5');
  await page.getByRole('button', { name: 'Save settings' }).click();
  await page.waitForURL(/\/admin\/settings\??$/);
  await page.locator('[data-setting="failure_threshold"]').getByText('set here').waitFor();
  assert.equal((await current(page, 'failure_threshold')).value, 5);
  page.assertNoErrors();
});
