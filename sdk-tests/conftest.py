"""Starts the mock upstream and SubLane (debug binaries from `target/debug`), seeds a Codex, a
Claude and an Antigravity account in the default pool and a gateway key, and hands the tests a base
URL and key.

SubLane runs with debug logs in JSON for the whole session; when it ends, the logs are searched for
every secret the session used (OPS-4: no key, token or password is ever logged) and must carry
request ids."""

import http.cookiejar
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import types
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(os.environ.get("SUBLANE_BIN_DIR", ROOT / "target" / "debug"))
ADMIN_PASSWORD = "sdk-admin-password"


def _read_until(proc, pattern):
    for line in proc.stdout:
        m = re.search(pattern, line)
        if m:
            return m.group(1)
    raise RuntimeError(f"{proc.args[0]} exited before printing {pattern!r}")


def _mock_env(proc):
    """The mock upstream's URL and the SUBLANE_* settings it prints before it listens (they point
    SubLane at it)."""
    env = {}
    for line in proc.stdout:
        m = re.match(r"(SUBLANE_\w+)=(\S*)$", line.strip())
        if m:
            env[m.group(1)] = m.group(2)
        elif m := re.search(r"listening on (\S+)", line):
            return m.group(1), env
    raise RuntimeError(f"{proc.args[0]} exited before it listened")


def _api(base):
    """POSTs JSON to SubLane's admin API with a session cookie and this site's Origin."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def post(path, body):
        req = urllib.request.Request(
            base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Origin": base},
        )
        with opener.open(req) as resp:
            return json.loads(resp.read() or b"null")

    return post


def _scripter(mock_url):
    """Sets the mock upstream's script (its JSON `Script`) for the accounts with these tokens."""

    def script(body, tokens):
        for token in tokens:
            req = urllib.request.Request(
                f"{mock_url}/__mock/accounts/{token}", data=json.dumps(body).encode(), method="PUT",
                headers={"Content-Type": "application/json"},
            )
            urllib.request.urlopen(req).close()

    return script


@pytest.fixture(scope="session")
def gateway():
    mock = subprocess.Popen([BIN / "mock-upstream", "--addr", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    mock_url, mock_env = _mock_env(mock)
    data = tempfile.mkdtemp(prefix="sublane-sdk-")
    env = {
        **os.environ,
        "SUBLANE_ADDR": "127.0.0.1:0",
        "SUBLANE_DATA_DIR": data,
        "SUBLANE_ADMIN_PASSWORD": ADMIN_PASSWORD,
        **mock_env,
        "RUST_LOG": "debug",
        "SUBLANE_LOG_FORMAT": "json",
    }
    log = open(pathlib.Path(data) / "sublane.log", "w+")
    sublane = subprocess.Popen([BIN / "sublane"], env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    secrets = [ADMIN_PASSWORD, "sdk-codex", "sdk-claude", "sdk-antigravity"]
    try:
        base = _read_until(sublane, r"serving on (\S+)")
        api = _api(base)
        api("/api/session", {"username": "admin", "password": ADMIN_PASSWORD})
        accounts = {}
        for account in (
            {"provider": "codex", "name": "codex-1", "pool_ids": [1],
             "credentials": {"kind": "oauth", "access_token": "sdk-codex", "provider_account_id": "acct-sdk"}},
            {"provider": "claude", "name": "claude-1", "pool_ids": [1],
             "credentials": {"kind": "oauth", "access_token": "sdk-claude"}},
            {"provider": "antigravity", "name": "antigravity-1", "pool_ids": [1],
             "credentials": {"kind": "oauth", "access_token": "sdk-antigravity", "provider_account_id": "proj-sdk"}},
        ):
            accounts[account["name"]] = api("/api/accounts", account)["id"]
        key = api("/api/me/keys", {"name": "sdk"})["secret"]
        secrets.append(key)
        yield types.SimpleNamespace(base=base, key=key, mock=mock_url, script=_scripter(mock_url), admin=api, accounts=accounts)
    finally:
        for proc in (sublane, mock):
            proc.terminate()
            proc.wait(timeout=10)
    log.seek(0)
    lines = log.read().splitlines()
    log.close()
    for secret in secrets:
        leaked = [line for line in lines if secret in line]
        assert not leaked, f"a secret is in SubLane's logs: {leaked[0][:200]}"
    calls = [json.loads(line) for line in lines if '"call finished"' in line]
    assert calls and all(c["fields"]["request_id"].startswith("req_") for c in calls), "calls are logged with ids"
    # Only once every check passed: a failed run leaves its data directory and log to look at.
    shutil.rmtree(data, ignore_errors=True)
