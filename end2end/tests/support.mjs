// Shared helpers for the browser tests: a fresh SubLane per test file (scripts/test-servers.mjs)
// and a headless Debian Chromium that fails the test on any page error.
import { chromium } from 'playwright-core';

import { ADMIN_PASSWORD, startServer } from '../../scripts/test-servers.mjs';

export { ADMIN_PASSWORD, startServer };

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
  page.on('pageerror', (e) => errors.push(`${page.url()}: ${e.message}`));
  // Expected 4xx answers (a wrong password is a 401) are logged by Chromium as resource errors;
  // anything else logged as an error, 5xx included, fails the test.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) {
      errors.push(`${page.url()}: ${m.text()}`);
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
