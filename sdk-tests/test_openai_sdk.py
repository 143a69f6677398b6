"""openai-python against SubLane's Responses API (PX-1), backed by a Codex account."""

import openai
import pytest


def client(gateway, key=None):
    return openai.OpenAI(base_url=f"{gateway.base}/v1", api_key=key or gateway.key, max_retries=0)


def test_streaming_response_events_parse(gateway):
    stream = client(gateway).responses.create(model="gpt-5.1-codex", input="Say hi", stream=True)
    events = list(stream)
    types = [e.type for e in events]
    assert types[0] == "response.created"
    assert types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 3
    done = events[-1].response
    assert done.output_text == "HelloHelloHello"
    assert done.usage.input_tokens_details.cached_tokens == 64
    assert done.usage.output_tokens == 7


def test_non_streaming_response(gateway):
    resp = client(gateway).responses.create(model="gpt-5.1-codex", input="Say hi")
    assert resp.status == "completed"
    assert resp.output_text == "HelloHelloHello"
    assert resp.usage.input_tokens == 120


def test_request_id_header_is_returned(gateway):
    raw = client(gateway).responses.with_raw_response.create(model="gpt-5.1-codex", input="x")
    assert raw.headers["x-request-id"].startswith("req_")


def test_bad_key_is_an_authentication_error_with_the_gateway_code(gateway):
    with pytest.raises(openai.AuthenticationError) as err:
        client(gateway, key="sk-sl-wrong").responses.create(model="gpt-5.1-codex", input="x")
    assert err.value.status_code == 401
    assert err.value.code == "invalid_api_key"


def test_websocket_mode_turns_and_continuation(gateway):
    """`responses.connect()`: a real Responses WebSocket client (PX-1, REC-9)."""
    c = client(gateway)
    with c.responses.connect() as conn:
        conn.response.create(model="gpt-5.1-codex", input="Say hi", store=False)
        first = []
        for event in conn:
            first.append(event)
            if event.type == "response.completed":
                break
        assert first[-1].response.output_text == "HelloHelloHello"
        conn.response.create(
            model="gpt-5.1-codex", input="again", store=False, previous_response_id=first[-1].response.id
        )
        second = []
        for event in conn:
            second.append(event)
            if event.type == "response.completed":
                break
        assert second[-1].response.usage.output_tokens == 7
    # request ids ride along on created/completed events (extra fields the SDK keeps)
    assert str(getattr(first[0], "request_id", "")).startswith("req_")
