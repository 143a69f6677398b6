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

JAR=$(mktemp)
api() { curl -fsS -b "$JAR" -c "$JAR" -H "Origin: $BASE" -H 'Content-Type: application/json' "$@"; }
api -d "{\"username\":\"admin\",\"password\":\"$PASSWORD\"}" "$BASE/api/session" >/dev/null
api -d '{"provider":"codex","name":"codex-plus-1","pool_ids":[1],"credentials":{"kind":"oauth","access_token":"demo-codex-1","provider_account_id":"acct-demo-1"}}' "$BASE/api/accounts" >/dev/null
api -d '{"provider":"codex","name":"codex-plus-2","pool_ids":[1],"credentials":{"kind":"oauth","access_token":"demo-codex-2","provider_account_id":"acct-demo-2"}}' "$BASE/api/accounts" >/dev/null
# A Claude account whose access token has a minute left: the first Claude call refreshes it.
SOON=$(date -u -d '+60 seconds' +%Y-%m-%dT%H:%M:%SZ)
CLAUDE_ID=$(api -d "{\"provider\":\"claude\",\"name\":\"claude-max-1\",\"pool_ids\":[1],\"credentials\":{\"kind\":\"oauth\",\"access_token\":\"sk-ant-oat01-demo-claude\",\"refresh_token\":\"demo-claude\",\"expires_at\":\"$SOON\"}}" "$BASE/api/accounts" | sed -n 's/^{"id":\([0-9]*\).*/\1/p')
KEY=$(api -d '{"name":"demo"}' "$BASE/api/me/keys" | sed -n 's/.*"secret":"\([^"]*\)".*/\1/p')

# A little traffic, including one scripted upstream rate limit, so the records have variety.
curl -fs -X PUT -H 'Content-Type: application/json' -d '{"steps":[{"kind":"status","status":429,"retry_after":"5"}]}' "$MOCK/__mock/accounts/demo-codex-2" >/dev/null
for i in 1 2 3; do
  curl -s -o /dev/null -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"model":"gpt-5.1-codex","stream":true,"input":"hello"}' "$BASE/v1/responses"
done
curl -s -o /dev/null -H "x-api-key: $KEY" -H 'Content-Type: application/json' \
  -d '{"model":"claude-opus-4-8","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}' "$BASE/v1/messages"

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

  Scheduling state (codex-plus-2 cooled for 5 s after its scripted 429):
  curl -s -b $JAR $BASE/api/accounts/runtime

Press Ctrl-C to stop.
MSG
wait
