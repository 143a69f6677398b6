// Shared helpers for the browser tests: a fresh SubLane per test file (own data dir, free port)
// and a headless Debian Chromium that fails the test on any page error.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

export const ADMIN_PASSWORD = 'e2e-admin-password';
const ROOT = resolve(import.meta.dirname, '..', '..');

/** Starts `sublane` on 127.0.0.1 with a random port; resolves to { url, stop }. */
export async function startServer() {
  const dataDir = mkdtempSync(join(tmpdir(), 'sublane-e2e-'));
  const bin = process.env.SUBLANE_BIN ?? join(ROOT, 'target', 'debug', 'sublane');
  const child = spawn(bin, [], {
    cwd: ROOT,
    env: {
      ...process.env,
      SUBLANE_ADDR: '127.0.0.1:0',
      SUBLANE_DATA_DIR: dataDir,
      SUBLANE_ADMIN_PASSWORD: ADMIN_PASSWORD,
      SUBLANE_SITE_ROOT: join(ROOT, 'target', 'site'),
      RUST_LOG: 'warn',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`server did not start: ${out}`)), 20000);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(/serving on (http:\/\/\S+)/);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`server exited with ${code}: ${out}`)); });
  });
  const stop = async () => {
    child.kill('SIGTERM');
    await new Promise((ok) => (child.exitCode !== null ? ok() : child.on('exit', ok)));
    rmSync(dataDir, { recursive: true, force: true });
  };
  return { url, stop };
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

/** A page that records uncaught errors; call `assertNoErrors()` at the end. */
export async function newPage(browser, options = {}) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  // Expected 4xx answers (a wrong password is a 401) are logged by Chromium as resource errors;
  // anything else logged as an error, 5xx included, fails the test.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) {
      errors.push(m.text());
    }
  });
  page.assertNoErrors = () => { if (errors.length) throw new Error(`page errors: ${errors.join(' | ')}`); };
  return page;
}

export async function waitForHydration(page) {
  await page.waitForSelector('body[data-hydrated]', { timeout: 15000 });
}

/** Signs in through the login form; `{ hydrated: false }` for pages without JavaScript. */
export async function signIn(page, url, { username = 'admin', password = ADMIN_PASSWORD, hydrated = true } = {}) {
  await page.goto(`${url}/login`);
  if (hydrated) await waitForHydration(page);
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${url}/`);
}
