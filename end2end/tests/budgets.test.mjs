// Budgets (BUD-1, UI-4): an admin adds, changes and deletes budgets and prices on the Budgets
// page; a member sees what applies to them in "My quota" and sets their own key's budget on the
// Keys page; past a budget, calls are refused. With JavaScript and without.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, newPage, signIn, waitForHydration } from './support.mjs';

let server, browser;
before(async () => { server = await startServer({ mock: true }); browser = await launchBrowser(); });
after(async () => { await browser?.close(); await server?.stop(); });

async function budgets(page) {
  return (await page.request.get(`${server.url}/api/budgets`)).json();
}

test('add a workspace budget, change its limit, see it in My quota, delete it', async () => {
  const page = await newPage(browser, { timezoneId: 'Asia/Tokyo' });
  await signIn(page, server.url);
  await page.getByRole('link', { name: 'Budgets' }).click();
  await page.waitForURL(`${server.url}/admin/budgets`);
  await waitForHydration(page);
  await page.getByText('No budgets yet').waitFor();

  await page.getByLabel('For', { exact: true }).selectOption('ws');
  await page.getByLabel('Counts').selectOption('requests');
  await page.getByLabel('Per', { exact: true }).selectOption('day');
  await page.getByLabel('Limit', { exact: true }).fill('abc');
  await page.getByRole('button', { name: 'Add budget' }).click();
  await page.locator('[data-field-error="limit"]').getByText(/not a number/).waitFor();
  await page.getByLabel('Limit', { exact: true }).fill('500');
  await page.getByRole('button', { name: 'Add budget' }).click();
  const row = page.getByTestId('budgets-table').locator('tr', { hasText: 'Workspace' });
  await row.getByText('500 requests / day', { exact: true }).waitFor();
  const [stored] = await budgets(page);
  assert.deepEqual([stored.subject, stored.metric, stored.window, stored.limit, stored.used], ['ws', 'requests', 'day', 500, 0]);

  await row.getByLabel(/New limit of Workspace/).fill('300');
  await row.getByRole('button', { name: 'Set' }).click();
  await page.getByTestId('budgets-table').getByText('300 requests / day', { exact: true }).waitFor();
  assert.equal((await budgets(page))[0].limit, 300);

  // a price for credits
  await page.getByLabel('Model').fill('gpt-5.1-codex');
  await page.getByLabel('Prompt').fill('1.25');
  await page.getByLabel('Completion').fill('10');
  await page.getByRole('button', { name: 'Set price' }).click();
  await page.getByTestId('prices-table').getByRole('rowheader', { name: 'gpt-5.1-codex' }).waitFor();

  // My quota on the Requests page, reset time in the viewer's zone
  await page.getByRole('link', { name: 'Requests', exact: true }).click();
  const card = page.getByTestId('my-quota');
  await card.getByText('300 requests / day', { exact: true }).waitFor();
  await card.getByText('300 remaining').waitFor();
  assert.equal(await card.locator('time').count(), 1, 'the reset time is shown');

  await page.goto(`${server.url}/admin/budgets`);
  await waitForHydration(page);
  const again = page.getByTestId('budgets-table').locator('tr', { hasText: 'Workspace' });
  await again.getByText('Delete…').click();
  await again.getByRole('button', { name: /Delete budget Workspace/ }).click();
  await page.getByText('No budgets yet').waitFor();
  assert.deepEqual(await budgets(page), []);
  page.assertNoErrors();
});

test('a key owner sets their key budget on the Keys page', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  await page.goto(`${server.url}/keys`);
  await waitForHydration(page);
  await page.getByLabel('Name').fill('budgeted key');
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.getByTestId('new-secret').waitFor();
  await page.getByText('None of your keys has a budget.').waitFor();
  await page.getByLabel('For', { exact: true }).selectOption({ label: 'budgeted key' });
  await page.getByLabel('Counts').selectOption('total_tokens');
  await page.getByLabel('Per', { exact: true }).selectOption('minutes');
  await page.getByLabel('N (minutes)').fill('15');
  await page.getByLabel('Limit', { exact: true }).fill('20000');
  await page.getByRole('button', { name: 'Add budget' }).click();
  await page.getByTestId('budgets-table').getByText('20000 total tokens / 15 minutes', { exact: true }).waitFor();
  const [stored] = await budgets(page);
  assert.deepEqual([stored.subject, stored.window, stored.window_minutes], ['apikey', 'minutes', 15]);
  page.assertNoErrors();
});

test('the budget form works without JavaScript', async () => {
  const page = await newPage(browser, { javaScriptEnabled: false });
  await signIn(page, server.url, { hydrated: false });
  await page.goto(`${server.url}/admin/budgets`);
  await page.getByLabel('For', { exact: true }).selectOption('member:1');
  await page.getByLabel('Counts').selectOption('credits');
  await page.getByLabel('Per', { exact: true }).selectOption('month');
  await page.getByLabel('Limit', { exact: true }).fill('2.5');
  await page.getByRole('button', { name: 'Add budget' }).click();
  await page.waitForURL(/\/admin\/budgets\??$/);
  await page.getByTestId('budgets-table').getByText('2.5 credits / month', { exact: true }).waitFor();
  page.assertNoErrors();
});

test('past a budget the next call is refused, and My quota says so', async () => {
  const page = await newPage(browser);
  await signIn(page, server.url);
  const api = (path, data) => page.request.post(`${server.url}${path}`, { headers: { Origin: server.url }, data });
  const acct = await api('/api/accounts', {
    provider: 'codex', name: 'budget-codex', pool_ids: [1],
    credentials: { kind: 'oauth', access_token: 'tok-budget', provider_account_id: 'acct-budget' },
  });
  assert.equal(acct.status(), 201, await acct.text());
  const key = (await (await api('/api/me/keys', { name: 'e2e-budget-calls' })).json()).secret;
  const call = () => fetch(`${server.url}/v1/responses`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'gpt-5.1-codex', stream: false, input: 'hi' }),
  });

  await page.goto(`${server.url}/admin/budgets`);
  await waitForHydration(page);
  await page.getByLabel('For', { exact: true }).selectOption('ws');
  await page.getByLabel('Counts').selectOption('requests');
  await page.getByLabel('Per', { exact: true }).selectOption('day');
  await page.getByLabel('Limit', { exact: true }).fill('1');
  await page.getByRole('button', { name: 'Add budget' }).click();
  await page.getByTestId('budgets-table').getByText('1 requests / day', { exact: true }).waitFor();

  const first = await call();
  assert.equal(first.status, 200, await first.text());
  assert.equal(first.headers.get('x-sublane-quota-requests-limit'), '1');
  let refused;
  for (let i = 0; i < 50 && !refused; i++) {
    const resp = await call();
    if (resp.status === 429) refused = await resp.json();
    else await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(refused, 'a call past the budget is refused');
  assert.equal(refused.error.message, 'rate limit exceeded on ws requests/day');
  assert.equal(refused.error.limit, 1);

  await page.goto(`${server.url}/`);
  await page.getByTestId('my-quota').locator('li', { hasText: '1 requests / day' }).getByText('0 remaining').waitFor();
  page.assertNoErrors();
});
