// Signed-in, hydrated: create an API key, see its secret once, find it listed, revoke it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

test('sign in, create a key, see it listed, revoke it', async () => {
  // A viewer east of UTC: times are typed and shown in their zone (UI-5).
  const page = await newPage(browser, { timezoneId: 'Asia/Tokyo' });
  await signIn(page, server.url);
  await waitForHydration(page);
  await assert.doesNotReject(page.getByRole('heading', { name: 'Requests' }).waitFor());
  // the admin sees the admin navigation
  await page.getByRole('link', { name: 'Accounts' }).waitFor();

  await page.getByRole('link', { name: 'API keys' }).click();
  await page.waitForURL(`${server.url}/keys`);
  await page.getByText('You have no API keys yet.').waitFor();

  await page.getByLabel('Name').fill('e2e laptop');
  await page.getByRole('button', { name: 'Create key' }).click();
  const secret = (await page.getByTestId('new-secret').textContent()).trim();
  assert.match(secret, /^sk-sl-[A-Za-z0-9_-]{43}$/);

  const row = page.locator('tr', { hasText: 'e2e laptop' });
  await row.waitFor();
  assert.equal(await row.getByTestId('key-status').textContent(), 'active');
  const hint = await row.locator('code').textContent();
  assert.ok(hint.startsWith(secret.slice(0, 10)) && !hint.includes(secret), `hint ${hint}`);

  // copy works without errors (clipboard may be denied headless; the button still answers)
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.getByRole('button', { name: 'Copied' }).waitFor();

  // switched off and back on; a second key with an expiry shows it
  await row.getByRole('button', { name: 'Disable key e2e laptop' }).click();
  await page.locator('tr', { hasText: 'e2e laptop' }).getByText('disabled').waitFor();
  await page.getByRole('button', { name: 'Enable key e2e laptop' }).click();
  await page.locator('tr', { hasText: 'e2e laptop' }).getByTestId('key-status').getByText('active').waitFor();
  await page.getByLabel('Name').fill('e2e expiring');
  await page.getByLabel('Expires (your time, optional)').fill('2099-01-31T18:00');
  await page.getByRole('button', { name: 'Create key' }).click();
  // 18:00 in Tokyo is 09:00 UTC; the table shows it in Tokyo time again
  const expiring = page.locator('tr', { hasText: 'e2e expiring' }).locator('time[datetime^="2099-01-31T09:00"]');
  await expiring.waitFor();
  assert.equal((await expiring.textContent()).trim(), '2099-01-31 18:00');

  await row.getByText('Revoke…').click();
  await row.getByRole('button', { name: 'Revoke key e2e laptop' }).click();
  await page.locator('tr', { hasText: 'e2e laptop' }).getByText('revoked').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Revoke key e2e laptop' }).count(), 0);

  // reloading shows the same state from the server, and never the secret
  await page.reload();
  await waitForHydration(page);
  await page.locator('tr', { hasText: 'e2e laptop' }).getByText('revoked').waitFor();
  assert.equal(await page.getByText(secret).count(), 0);

  page.assertNoErrors();
});

test('wrong password shows an error and stays on the login page', async () => {
  const page = await newPage(browser);
  await page.goto(`${server.url}/login`);
  await waitForHydration(page);
  await page.getByLabel('Username').fill('admin');
  await page.getByLabel('Password').fill('not-the-password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'wrong username or password' }).waitFor();
  assert.equal(new URL(page.url()).pathname, '/login');
  page.assertNoErrors();
});

test('signed-out visitors are sent to the login page', async () => {
  const page = await newPage(browser);
  await page.goto(`${server.url}/keys`);
  await page.waitForURL(`${server.url}/login`);
  page.assertNoErrors();
});
