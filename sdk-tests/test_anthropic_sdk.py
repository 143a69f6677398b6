"""anthropic-python against SubLane's Messages API (PX-2), backed by a Claude OAuth account.
anthropic-python sends its key as `Authorization: Bearer`; SubLane accepts that too (ID-3)."""

import threading

import anthropic
import pytest


def client(gateway, key=None):
    return anthropic.Anthropic(base_url=gateway.base, api_key=key or gateway.key, max_retries=0)


def test_streaming_message(gateway):
    with client(gateway).messages.stream(
        model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "Say hi"}]
    ) as stream:
        text = stream.get_final_text()
        final = stream.get_final_message()
    assert text == "HelloHelloHello"
    assert final.stop_reason == "end_turn"
    assert final.usage.cache_read_input_tokens == 64
    assert final.usage.output_tokens == 7


def test_a_stream_cut_before_its_end_raises(gateway):
    # the upstream breaks off mid-stream: SubLane ends the stream with Anthropic's own
    # mid-stream error event, which the SDK raises, rather than a message with no stop_reason
    # (the pause lets the first delta leave the mock before the break, as on a real connection)
    gateway.script({"delta_delay_ms": 30, "steps": [{"kind": "abort", "after_deltas": 2}]}, ["sdk-claude"])
    try:
        with pytest.raises(anthropic.APIStatusError) as err:
            with client(gateway).messages.stream(
                model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "Say hi"}]
            ) as stream:
                stream.get_final_message()
    finally:
        gateway.script({}, ["sdk-claude"])
    assert err.value.body["error"]["code"] == "upstream_stream_broken", err.value.body


def test_a_prompt_too_long_is_a_bad_request_in_anthropics_words(gateway):
    # Claude Code compacts the conversation and retries when a 400 says this; the numbers are
    # the upstream's, the words SubLane's
    gateway.script({"steps": [{"kind": "context_too_long", "tokens": 210118, "limit": 200000}]}, ["sdk-claude"])
    try:
        with pytest.raises(anthropic.BadRequestError) as err:
            client(gateway).messages.create(
                model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "Say hi"}]
            )
    finally:
        gateway.script({}, ["sdk-claude"])
    assert err.value.body["error"]["message"] == "prompt is too long: 210118 tokens > 200000 maximum"
    assert "prompt is too long: 210118 tokens > 200000 maximum" in str(err.value)


def test_a_pool_limited_for_minutes_raises_at_once_instead_of_sleeping(gateway):
    # anthropic-python sleeps through any Retry-After before retrying (15 minutes here, twice):
    # SubLane says x-should-retry: false when no account can serve sooner than 2 minutes, on
    # the upstream's own 429 and on its refusal of the next call, and the SDK raises at once
    sdk = anthropic.Anthropic(base_url=gateway.base, api_key=gateway.key, max_retries=2)
    gateway.script({"steps": [{"kind": "status", "status": 429, "retry_after": "900"}]}, ["sdk-claude"])
    errors = []

    def call():
        try:
            sdk.messages.create(model="claude-opus-4-8", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
        except anthropic.RateLimitError as e:
            errors.append(e)

    try:
        for _ in range(2):
            worker = threading.Thread(target=call, daemon=True)
            worker.start()
            worker.join(timeout=20)
            assert not worker.is_alive(), "the SDK is sleeping through the Retry-After"
    finally:
        gateway.script({}, ["sdk-claude"])
        gateway.admin(f"/api/accounts/{gateway.accounts['claude-1']}/resume", {})
    assert [e.response.headers.get("x-should-retry") for e in errors] == ["false", "false"]
    assert int(errors[0].response.headers["retry-after"]) == 900
    assert errors[1].body["error"]["code"] in ("account_cooling", "upstream_quota_exhausted"), errors[1].body


def test_models_retrieve(gateway):
    assert client(gateway).models.retrieve("claude-opus-4-8").id == "claude-opus-4-8"
    with pytest.raises(anthropic.NotFoundError):
        client(gateway).models.retrieve("not-a-model")


def test_non_streaming_message(gateway):
    msg = client(gateway).messages.create(
        model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "Say hi"}]
    )
    assert msg.content[0].text == "HelloHelloHello"


def test_count_tokens(gateway):
    count = client(gateway).messages.count_tokens(
        model="claude-opus-4-8", messages=[{"role": "user", "content": "Say hi"}]
    )
    assert count.input_tokens == 120


def test_bad_key_is_an_authentication_error(gateway):
    with pytest.raises(anthropic.AuthenticationError) as err:
        client(gateway, key="sk-sl-wrong").messages.create(
            model="claude-opus-4-8", max_tokens=8, messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.status_code == 401
    assert err.value.body["error"]["code"] == "invalid_api_key"
