#!/usr/bin/env bash
# SubLane demo: no subscription needed. Starts the mock upstream and SubLane (fresh data in
# ./data-demo), seeds accounts for every protocol the proxy speaks, makes an API key, sends a few
# calls so there is traffic, and prints how to sign in and call it. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SUBLANE_BIN_DIR:-target/release}
ADDR=${SUBLANE_DEMO_ADDR:-127.0.0.1:3000}
MOCK_ADDR=${SUBLANE_DEMO_MOCK_ADDR:-127.0.0.1:4000}
BASE=http://$ADDR
MOCK=http://$MOCK_ADDR
PASSWORD=demo-admin-password
DATA=./data-demo

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

rm -rf "$DATA"
MOCK_OUT=$(mktemp)
"$BIN/mock-upstream" --addr "$MOCK_ADDR" >"$MOCK_OUT" &
pids+=($!)
for _ in $(seq 100); do grep -q 'listening on' "$MOCK_OUT" && break; sleep 0.1; done
grep -q 'listening on' "$MOCK_OUT" || { echo "the mock upstream did not start on $MOCK" >&2; exit 1; }
# The mock prints the SUBLANE_* settings that point SubLane at it.
set -a; source <(grep '^SUBLANE_' "$MOCK_OUT"); set +a
SUBLANE_ADDR=$ADDR SUBLANE_DATA_DIR=$DATA SUBLANE_ADMIN_PASSWORD=$PASSWORD RUST_LOG=warn \
  "$BIN/sublane" >/dev/null &
pids+=($!)

for _ in $(seq 100); do curl -fs "$BASE/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "$BASE/healthz" >/dev/null || { echo "SubLane did not start on $BASE" >&2; exit 1; }

# Quota as each mock account reports it (its usage read and the headers of its answers agree):
# codex-plus-1 runs ahead of an even pace, codex-plus-2 behind, codex-plus-3 has spent its 5-hour
# window, and the Claude account is a little behind. Each 5-hour window is half gone now.
NOW=$(date +%s)
codex_quota() { # <5-hour used %> <weekly used %> <limit reached> <credential> [<more script fields>]
  local used=$1 reached=$3
  curl -fs -X PUT -H 'Content-Type: application/json' "$MOCK/__mock/accounts/$4" -d "{ ${5:-}
    \"quota\": {\"plan_type\": \"plus\", \"rate_limit\": {\"allowed\": $([ "$reached" = true ] && echo false || echo true), \"limit_reached\": $reached,
      \"primary_window\": {\"used_percent\": $used, \"limit_window_seconds\": 18000, \"reset_at\": $((NOW + 9000))},
      \"secondary_window\": {\"used_percent\": $2, \"limit_window_seconds\": 604800, \"reset_at\": $((NOW + 302400))}}},
    \"quota_headers\": {\"x-codex-primary-used-percent\": \"$used\", \"x-codex-primary-window-minutes\": \"300\",
      \"x-codex-primary-reset-at\": \"$((NOW + 9000))\", \"x-codex-secondary-used-percent\": \"$2\",
      \"x-codex-secondary-window-minutes\": \"10080\", \"x-codex-secondary-reset-at\": \"$((NOW + 302400))\"}}" >/dev/null
}
codex_quota 70 55 false demo-codex-1
# codex-plus-2's first call is also a scripted upstream rate limit, so the records have variety.
codex_quota 25 30 false demo-codex-2 '"steps": [{"kind": "status", "status": 429, "retry_after": "5"}],'
codex_quota 100 80 true demo-codex-3
CLAUDE_QUOTA="{\"quota_headers\": {\"anthropic-ratelimit-unified-status\": \"allowed\",
  \"anthropic-ratelimit-unified-5h-utilization\": \"0.45\", \"anthropic-ratelimit-unified-5h-reset\": \"$((NOW + 9000))\",
  \"anthropic-ratelimit-unified-7d-utilization\": \"0.30\", \"anthropic-ratelimit-unified-7d-reset\": \"$((NOW + 302400))\"}}"
for c in sk-ant-oat01-demo-claude sk-ant-oat01-demo-claude.1; do
  curl -fs -X PUT -H 'Content-Type: application/json' -d "$CLAUDE_QUOTA" "$MOCK/__mock/accounts/$c" >/dev/null
done

JAR=$(mktemp)
api() { curl -fsS -b "$JAR" -c "$JAR" -H "Origin: $BASE" -H 'Content-Type: application/json' "$@"; }
api -d "{\"username\":\"admin\",\"password\":\"$PASSWORD\"}" "$BASE/api/session" >/dev/null
api -d '{"provider":"codex","name":"codex-plus-1","pool_ids":[1],"credentials":{"kind":"oauth","access_token":"demo-codex-1","provider_account_id":"acct-demo-1"}}' "$BASE/api/accounts" >/dev/null
api -d '{"provider":"codex","name":"codex-plus-2","pool_ids":[1],"credentials":{"kind":"oauth","access_token":"demo-codex-2","provider_account_id":"acct-demo-2"}}' "$BASE/api/accounts" >/dev/null
api -d '{"provider":"codex","name":"codex-plus-3","pool_ids":[1],"credentials":{"kind":"oauth","access_token":"demo-codex-3","provider_account_id":"acct-demo-3"}}' "$BASE/api/accounts" >/dev/null
# A Claude account whose access token has a minute left: the first Claude call refreshes it.
SOON=$(date -u -d '+60 seconds' +%Y-%m-%dT%H:%M:%SZ)
CLAUDE_ID=$(api -d "{\"provider\":\"claude\",\"name\":\"claude-max-1\",\"pool_ids\":[1],\"credentials\":{\"kind\":\"oauth\",\"access_token\":\"sk-ant-oat01-demo-claude\",\"refresh_token\":\"demo-claude\",\"expires_at\":\"$SOON\"}}" "$BASE/api/accounts" | sed -n 's/^{"id":\([0-9]*\).*/\1/p')
MADE=$(api -d '{"name":"demo"}' "$BASE/api/me/keys")
KEY=$(echo "$MADE" | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')
KEY_ID=$(echo "$MADE" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"]["id"])')

# A little traffic.
# The Accounts page (here its JSON) reads every Codex account's quota: codex-plus-3 is spent.
api "$BASE/api/accounts/runtime" >/dev/null
for i in 1 2 3; do
  curl -s -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"model":"gpt-5.1-codex","stream":true,"input":"hello"}' "$BASE/v1/responses"
done
curl -s -o /dev/null -H "x-api-key: $KEY" -H 'Content-Type: application/json' \
  -d '{"model":"claude-opus-4-8","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}' "$BASE/v1/messages"

# A few more calls today, of other models and one the upstream refuses, for the Usage page.
for model in gpt-5.1 gpt-5.1-codex-mini; do
  curl -s -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$model\",\"input\":\"hello\"}" "$BASE/v1/responses"
done
curl -s -o /dev/null -X PUT -H 'Content-Type: application/json' -d '{"steps": [{"kind": "status", "status": 500}, {"kind": "status", "status": 500}, {"kind": "status", "status": 500}]}' "$MOCK/__mock/accounts/demo-codex-1"
curl -s -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"model":"gpt-5.1-codex","input":"hello"}' "$BASE/v1/responses"

# Usage history (BEY-1): the daily summaries of four weeks of made-up calls before today, so the
# Usage page's charts have a shape. They go straight into the database, as the record writer
# would have written them; today's numbers are the real calls above.
python3 - "$DATA/sublane.db" "$KEY_ID" <<'PY'
import random, sqlite3, sys
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo
db, key = sqlite3.connect(sys.argv[1], timeout=10), int(sys.argv[2])
today = datetime.now(ZoneInfo("Asia/Shanghai")).date()
rng = random.Random(7)
models = [("gpt-5.1-codex", 1, 120), ("gpt-5.1", 2, 40), ("claude-opus-4-8", 4, 25)]
rows = []
for back in range(1, 29):
    day = (today - timedelta(days=back)).isoformat()
    weekday = (today - timedelta(days=back)).weekday() < 5
    for model, account, base in models:
        n = int(base * (1.0 if weekday else 0.3) * rng.uniform(0.6, 1.3))
        errors = int(n * rng.choice([0.0, 0.01, 0.02, 0.08]))
        cancelled = int(n * 0.02)
        inp = n * rng.randint(2500, 9000)
        rows.append((day, 1, key, 1, account, model, n, n - errors - cancelled, 0, errors, cancelled, 0,
                     inp, n * rng.randint(300, 1200), int(inp * rng.uniform(0.3, 0.7)),
                     n * rng.randint(4000, 20000), n * rng.randint(400, 1500), n - errors))
db.executemany("INSERT INTO usage_daily VALUES (" + ",".join("?" * 18) + ")", rows)
db.commit()
PY

# The token refresh the Claude call made (CRED-1): the new expiry and the refresh time.
TOKEN=$(api "$BASE/api/accounts/runtime" | python3 -c "import json,sys; a=[x for x in json.load(sys.stdin) if x['id']==$CLAUDE_ID][0]['token']; from datetime import datetime, timezone as tz; t=lambda s: datetime.fromtimestamp(s, tz.utc).strftime('%H:%M:%S UTC'); print(f\"refreshed at {t(a['refreshed_at'])}, the new token expires at {t(a['expires_at'])}\")")
REFRESHES=$(curl -fs "$MOCK/__mock/accounts/token:demo-claude/calls" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')

cat <<MSG

SubLane demo is running (mock upstream on $MOCK, data in $DATA).

  Sign in:   $BASE/login   user: admin   password: $PASSWORD
  API key:   $KEY

  curl -N $BASE/v1/responses -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \\
       -d '{"model":"gpt-5.1-codex","stream":true,"input":"Say hi"}'

  curl $BASE/v1/messages -H "x-api-key: $KEY" -H 'Content-Type: application/json' \\
       -d '{"model":"claude-opus-4-8","max_tokens":64,"messages":[{"role":"user","content":"Say hi"}]}'

  Token refresh: claude-max-1's access token had a minute left, so the Claude call above
  refreshed it first ($REFRESHES call to the mock's token endpoint): $TOKEN

  Add an account in the web app (Admin -> Accounts -> Add account): "Sign in with the provider"
  opens the mock's sign-in page, which signs in at once and sends the browser to a localhost
  callback that does not load; paste that address back.

  Quota (Admin -> Accounts): pace bars for each account; codex-plus-1 runs ahead of an even
  pace, codex-plus-2 and claude-max-1 behind it, and codex-plus-3 is "quota exhausted", so new
  requests leave it out. Pace is shown while the observation is fresh (2 minutes); opening the
  page reads the Codex accounts again, the Claude one is observed from its answers.

  Usage (General -> Usage, Admin -> Workspace usage): four weeks of sample history and
  today's calls, as charts, a table and a CSV download.

  Metrics: curl -s $BASE/metrics

  Scheduling state (codex-plus-2 cooled for 5 s after its scripted 429):
  curl -s -b $JAR $BASE/api/accounts/runtime

Press Ctrl-C to stop.
MSG
wait
