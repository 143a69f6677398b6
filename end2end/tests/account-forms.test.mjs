// Admin -> Accounts against the mock upstream: adding accounts (a provider sign-in with the code
// pasted back, an uploaded CLI credential file, an API key), the token line, Refresh token,
// Re-authorize, editing settings and deleting after a confirmation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer({ mock: true }); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

async function openAccounts(page) {
  await signIn(page, server.url);
  await page.goto(`${server.url}/admin/accounts`);
  await waitForHydration(page);
  return page.getByRole('region', { name: 'Add account' });
}

/** Waits until the locator's text matches `pattern`. */
async function waitForText(locator, pattern) {
  for (let i = 0; i < 100; i++) {
    if (pattern.test((await locator.textContent()) ?? '')) return;
    await new Promise((ok) => setTimeout(ok, 100));
  }
  assert.match(await locator.textContent(), pattern);
}

/** Signs in at the provider's page (the mock signs in at once) and returns the callback address. */
async function signInAtProvider(page, scope) {
  await scope.getByRole('button', { name: 'Start sign-in' }).click();
  const link = scope.getByRole('link', { name: 'Open the sign-in page' });
  await link.waitFor();
  const href = await link.getAttribute('href');
  assert.ok(href.startsWith(server.mockUrl), href);
  const resp = await page.request.get(href, { maxRedirects: 0 });
  assert.equal(resp.status(), 302, await resp.text());
  return resp.headers().location;
}

test('an account added by signing in at the provider, then refreshed and re-authorized', async () => {
  const page = await newPage(browser);
  const form = await openAccounts(page);
  await form.getByLabel('Provider', { exact: true }).selectOption('claude');
  const callback = await signInAtProvider(page, form);
  await form.getByLabel('Paste the code, or the whole address of that page').fill(callback);
  await form.getByLabel('Name').fill('claude-signed-in');
  await form.getByRole('button', { name: 'Add account' }).click();
  await form.getByText('Added claude-signed-in.').waitFor();
  const card = page.getByRole('article', { name: 'claude-signed-in' });
  await card.waitFor();
  await waitForText(card.getByTestId('token'), /Token: expires/);

  await card.getByRole('button', { name: 'Refresh token: claude-signed-in' }).click();
  await waitForText(card.getByTestId('token'), /last refreshed/);

  await card.getByLabel('Re-authorize: claude-signed-in').click();
  const reauth = card.getByTestId('reauthorize');
  const again = await signInAtProvider(page, reauth);
  await reauth.getByLabel('Paste the code, or the whole address of that page').fill(again);
  await reauth.getByRole('button', { name: 'Replace credentials' }).click();
  await page.getByText('New credentials for claude-signed-in.').waitFor();
  page.assertNoErrors();
});

test('an account added from an uploaded credential file; a wrong file is named', async (t) => {
  const page = await newPage(browser);
  const form = await openAccounts(page);
  await form.getByLabel('Provider', { exact: true }).selectOption('codex');
  await form.getByLabel('Import a CLI credential file').check();
  const dir = mkdtempSync(join(tmpdir(), 'sublane-e2e-file-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const claudeFile = join(dir, 'credentials.json');
  writeFileSync(claudeFile, JSON.stringify({ claudeAiOauth: { accessToken: 'sk-ant-oat01-x', refreshToken: 'r', expiresAt: Date.now() + 3600e3 } }));
  await form.getByLabel('Upload the file').setInputFiles(claudeFile);
  await page.waitForFunction(() => document.querySelector('textarea[name=file]').value.includes('claudeAiOauth'));
  await form.getByLabel('Name').fill('codex-from-file');
  await form.getByRole('button', { name: 'Add account' }).click();
  await form.getByText(/this is a Claude Code .credentials.json/).waitFor();

  const codexFile = join(dir, 'auth.json');
  writeFileSync(codexFile, JSON.stringify({ auth_mode: 'chatgpt', OPENAI_API_KEY: null,
    tokens: { id_token: '', access_token: 'at-e2e-file', refresh_token: 'e2e-file', account_id: 'acct-e2e' } }));
  await form.getByLabel('Upload the file').setInputFiles(codexFile);
  await page.waitForFunction(() => document.querySelector('textarea[name=file]').value.includes('acct-e2e'));
  await form.getByRole('button', { name: 'Add account' }).click();
  await form.getByText('Added codex-from-file.').waitFor();
  const card = page.getByRole('article', { name: 'codex-from-file' });
  await waitForText(card.getByTestId('token'), /no expiry known/);
  page.assertNoErrors();
});

test('an API key account: added, edited, deleted after a confirmation', async () => {
  const page = await newPage(browser);
  const form = await openAccounts(page);
  await form.getByLabel('Provider', { exact: true }).selectOption('openai_api');
  await form.getByLabel('API key').fill('sk-e2e-key');
  await form.getByLabel('Name').fill('openai-key');
  await form.getByRole('button', { name: 'Add account' }).click();
  await form.getByText('Added openai-key.').waitFor();
  const card = page.getByRole('article', { name: 'openai-key' });
  await card.waitFor();
  assert.equal(await card.getByRole('button', { name: 'Refresh token: openai-key' }).count(), 0);

  const settings = card.getByRole('region', { name: 'Settings' });
  await settings.getByLabel('Name').fill('openai-key-renamed');
  await settings.getByLabel('Priority').fill('4');
  await settings.getByRole('button', { name: 'Save' }).click();
  const renamed = page.getByRole('article', { name: 'openai-key-renamed' });
  await renamed.waitFor();
  await waitForText(renamed, /priority 4/);

  await renamed.getByLabel('Delete: openai-key-renamed').click();
  const confirm = renamed.getByRole('alertdialog', { name: 'Delete openai-key-renamed?' });
  await confirm.getByRole('button', { name: 'Delete account' }).click();
  await renamed.waitFor({ state: 'detached' });
  page.assertNoErrors();
});
