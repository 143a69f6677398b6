// With JavaScript disabled the app still signs in (plain form post) and renders pages for reading.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn } from './support.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

test('requests page renders without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await page.getByRole('heading', { name: 'Requests' }).waitFor();
  const headers = await page.locator('[data-testid=requests-table] th').allTextContents();
  assert.ok(headers.includes('First output') && headers.includes('Cache hit'), headers.join(','));
  await page.getByText('No requests recorded yet.').waitFor();
  assert.equal(await page.locator('body[data-hydrated]').count(), 0, 'no hydration without JS');

  // navigation links are plain links: the keys page renders too, and a key can be made by form post
  await page.getByRole('link', { name: 'API keys' }).click();
  await page.waitForURL(`${server.url}/keys`);
  await page.getByText('You have no API keys yet.').waitFor();
  page.assertNoErrors();
});

test('a refused form comes back to its page with the error, without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await page.goto(`${server.url}/login`);
  await page.getByLabel('Username').fill('admin');
  await page.getByLabel('Password').fill('not-the-password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'wrong username or password' }).waitFor();
  assert.ok(page.url().startsWith(`${server.url}/login?`), page.url());

  // creating a key is refused in words, before a key (whose secret the page could not show) is made
  await signIn(page, server.url, { hydrated: false });
  await page.goto(`${server.url}/keys`);
  await page.getByLabel('Name').fill('laptop');
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.getByRole('alert').filter({ hasText: 'Creating a key needs JavaScript' }).waitFor();
  await page.getByText('You have no API keys yet.').waitFor();
  page.assertNoErrors();
});
