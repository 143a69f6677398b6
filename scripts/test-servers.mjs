// A fresh SubLane per test file (own data dir, free port), with the mock upstream when asked: shared
// by the browser tests (end2end/) and the real-client tests (client-tests/). No dependencies.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const ADMIN_PASSWORD = 'e2e-admin-password';
const ROOT = resolve(import.meta.dirname, '..');

/** Starts `bin` with `env` and resolves to { child, url } once its stdout matches `ready`. */
function spawnUntil(bin, args, env, ready) {
  const child = spawn(bin, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`${bin} did not start: ${out}`)), 20000);
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const m = out.match(ready);
      if (m) { clearTimeout(timer); ok({ child, url: m[1], out }); }
    });
    child.on('exit', (code) => { clearTimeout(timer); fail(new Error(`${bin} exited with ${code}: ${out}`)); });
  });
}

async function stopChild(child) {
  child.kill('SIGTERM');
  await new Promise((ok) => (child.exitCode !== null ? ok() : child.on('exit', ok)));
}

/** The `SUBLANE_*` settings the mock printed before it listened: they point SubLane at it. */
function mockEnv(out) {
  return Object.fromEntries([...out.matchAll(/^(SUBLANE_\w+)=(\S*)$/gm)].map((m) => [m[1], m[2]]));
}

/**
 * Starts `sublane` on 127.0.0.1 with a random port, and with `{ mock: true }` the mock upstream
 * it talks to; resolves to { url, mockUrl, stop }.
 */
export async function startServer({ mock = false } = {}) {
  const dataDir = mkdtempSync(join(tmpdir(), 'sublane-e2e-'));
  const bin = process.env.SUBLANE_BIN ?? join(ROOT, 'target', 'debug', 'sublane');
  const upstream = mock
    ? await spawnUntil(join(ROOT, 'target', 'debug', 'mock-upstream'), ['--addr', '127.0.0.1:0'], {}, /listening on (http:\/\/\S+)/)
    : null;
  const { child, url } = await spawnUntil(bin, [], {
    SUBLANE_ADDR: '127.0.0.1:0',
    SUBLANE_DATA_DIR: dataDir,
    SUBLANE_ADMIN_PASSWORD: ADMIN_PASSWORD,
    SUBLANE_SITE_ROOT: join(ROOT, 'target', 'site'),
    RUST_LOG: 'warn',
    ...(upstream ? mockEnv(upstream.out) : {}),
  }, /serving on (http:\/\/\S+)/);
  const stop = async () => {
    await stopChild(child);
    if (upstream) await stopChild(upstream.child);
    rmSync(dataDir, { recursive: true, force: true });
  };
  return { url, mockUrl: upstream?.url, stop };
}
