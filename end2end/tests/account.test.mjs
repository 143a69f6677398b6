// Your account: a member changes their own password in the browser and signs in with the new one.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer(); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

test('a member changes their own password', async () => {
  const admin = await newPage(browser);
  await signIn(admin, server.url);
  const made = await admin.request.post(`${server.url}/api/members`, {
    headers: { Origin: server.url },
    data: { username: 'dana', password: 'dana-password-1', pool_ids: [1] },
  });
  assert.equal(made.status(), 201, await made.text());

  const page = await newPage(browser);
  await signIn(page, server.url, { username: 'dana', password: 'dana-password-1' });
  await page.goto(`${server.url}/account`);
  await waitForHydration(page);
  await page.getByLabel('Current password').fill('wrong-password-0');
  await page.getByLabel('New password', { exact: true }).fill('dana-password-2');
  await page.getByLabel('New password again').fill('dana-password-2');
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.getByRole('alert').getByText(/current password is wrong/).waitFor();

  await page.getByLabel('Current password').fill('dana-password-1');
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.getByText('Your password was changed.').waitFor();

  const fresh = await newPage(browser);
  await signIn(fresh, server.url, { username: 'dana', password: 'dana-password-2' });
  assert.equal(new URL(fresh.url()).pathname, '/');
  fresh.assertNoErrors();
});
