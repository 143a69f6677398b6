// Admin -> Members and Admin -> All API keys: add a member with a pool and sign in as them; a
// refused value is shown beside its field; limits, switch off, delete after a confirmation; every
// key listed by member, switched off and revoked. Readable without JavaScript.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

async function members(page) {
  const resp = await page.request.get(`${server.url}/api/members`);
  return resp.json();
}

test('add a member to a pool, sign in as them, change their limits, switch them off, delete them', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await page.goto(`${server.url}/admin/members`);
  await waitForHydration(page);
  const form = page.getByRole('region', { name: 'Add a member' });
  await form.getByLabel('Username').fill('erin');
  await form.getByLabel('Password').fill('short');
  await form.getByLabel('default').check();
  await form.getByRole('button', { name: 'Add member' }).click();
  // the refusal sits beside the password field, and names it
  await form.locator('[data-field-error="password"]').getByText(/password must have at least/).waitFor();
  await form.getByLabel('Password').fill('erin-password-1');
  await form.getByRole('button', { name: 'Add member' }).click();
  await form.getByText('Added erin.').waitFor();
  const row = page.locator('[data-member="erin"]');
  await row.getByRole('cell', { name: 'default' }).waitFor();

  const erin = await newPage(browser);
  await signIn(erin, server.url, { username: 'erin', password: 'erin-password-1' });
  assert.equal(new URL(erin.url()).pathname, '/');
  const made = await erin.request.post(`${server.url}/api/me/keys`, { headers: { Origin: server.url }, data: { name: 'erin-laptop' } });
  assert.equal(made.status(), 201, 'erin may use the pool she was added to');

  await row.getByText('Edit', { exact: true }).click();
  // past the browser's own check (min=1), the server refuses it and names the field
  await row.getByLabel('Requests per minute (empty: no limit)').evaluate((el) => { el.removeAttribute('min'); el.value = '0'; });
  await row.getByRole('button', { name: 'Save' }).click();
  await row.locator('[data-field-error="rpm_limit"]').getByText(/rpm_limit must be between 1/).waitFor();
  await row.getByLabel('Requests per minute (empty: no limit)').fill('30');
  await row.getByRole('button', { name: 'Save' }).click();
  await page.locator('[data-member="erin"]').getByRole('cell', { name: '30', exact: true }).waitFor();

  await page.getByRole('button', { name: 'Disable erin' }).click();
  await page.locator('[data-member="erin"]').getByText('disabled', { exact: true }).waitFor();
  await erin.reload();
  assert.equal(new URL(erin.url()).pathname, '/login', 'a switched-off member is signed out');

  // the admin's own keys page, then all keys: erin's key listed by member, switched off, revoked
  await page.goto(`${server.url}/admin/keys`);
  await waitForHydration(page);
  const erinId = (await members(page)).find((m) => m.username === 'erin').id;
  await page.getByLabel('Member').selectOption(String(erinId));
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.waitForURL(new RegExp(`member_id=${erinId}`));
  const keyRow = page.locator('[data-key-id]');
  await keyRow.getByRole('rowheader', { name: 'erin-laptop' }).waitFor();
  assert.equal(await keyRow.count(), 1);
  await page.getByRole('button', { name: 'Disable key erin-laptop (erin)' }).click();
  await keyRow.getByTestId('key-status').getByText('disabled').waitFor();
  await keyRow.getByText('Revoke…').click();
  await page.getByRole('button', { name: 'Revoke key erin-laptop (erin)' }).click();
  await keyRow.getByTestId('key-status').getByText('revoked').waitFor();

  await page.goto(`${server.url}/admin/members`);
  await waitForHydration(page);
  await page.locator('[data-member="erin"]').getByText('Delete erin…').click();
  await page.getByRole('button', { name: 'Delete erin', exact: true }).click();
  await page.getByText(/Deleted; 0 of their API keys revoked/).waitFor();
  await page.locator('[data-member="erin"]').waitFor({ state: 'detached' });
  assert.ok(!(await members(page)).some((m) => m.username === 'erin'));
  page.assertNoErrors();
});

test('the members and keys pages read without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await page.goto(`${server.url}/admin/members`);
  await page.locator('[data-member="admin"]').getByRole('cell', { name: 'admin', exact: true }).first().waitFor();
  await page.goto(`${server.url}/admin/keys`);
  await page.getByRole('button', { name: 'Filter' }).waitFor();
  page.assertNoErrors();
});
