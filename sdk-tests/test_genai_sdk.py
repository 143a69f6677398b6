"""google-genai against SubLane's Gemini API (PX-3), served by an Antigravity account: the SDK
sends `x-goog-api-key` to `/v1beta/models/{model}:generateContent` (and the streaming form)."""

import pytest
from google import genai
from google.genai import errors, types


def client(gateway, key=None):
    return genai.Client(api_key=key or gateway.key, http_options=types.HttpOptions(base_url=gateway.base))


# Keep the client referenced while it is used: google-genai closes its HTTP client when the
# Client object is collected.


def test_generate_content(gateway):
    c = client(gateway)
    resp = c.models.generate_content(model="gemini-3.1-pro-low", contents="Say hi")
    assert resp.text == "HelloHelloHello"
    assert resp.usage_metadata.cached_content_token_count == 64


def test_generate_content_stream(gateway):
    c = client(gateway)
    chunks = list(c.models.generate_content_stream(model="gemini-3.1-pro-low", contents="Say hi"))
    assert [c.text for c in chunks] == ["Hello", "Hello", "Hello"]
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP


def test_a_stream_silent_for_longer_than_the_heartbeat_period_reaches_the_client_whole(gateway):
    # SSE streams get a comment heartbeat after 10 s without a byte to send (CD-6). Google's own
    # streams carry no comments, and google-genai reads a line that is not `data: ...` as a JSON
    # document: a comment would end its stream with an error.
    gateway.script({"deltas": 2, "delta_delay_ms": 10_500}, ("sdk-antigravity",))
    try:
        c = client(gateway)
        chunks = list(c.models.generate_content_stream(model="gemini-3.1-pro-low", contents="Say hi"))
    finally:
        gateway.script({}, ("sdk-antigravity",))
    assert [c.text for c in chunks] == ["Hello", "Hello"]


def test_generate_content_under_the_antigravity_prefix(gateway):
    c = genai.Client(api_key=gateway.key, http_options=types.HttpOptions(base_url=f"{gateway.base}/antigravity"))
    resp = c.models.generate_content(model="gemini-3.1-pro-low", contents="Say hi")
    assert resp.text == "HelloHelloHello"
    assert c.models.get(model="gemini-3.1-pro-low").name == "models/gemini-3.1-pro-low"


def test_models_get(gateway):
    c = client(gateway)
    model = c.models.get(model="gemini-3.1-pro-low")
    assert model.name == "models/gemini-3.1-pro-low"
    with pytest.raises(errors.ClientError) as err:
        c.models.get(model="not-a-model")
    assert err.value.code == 404


def test_bad_key(gateway):
    c = client(gateway, key="sk-sl-wrong")
    try:
        c.models.generate_content(model="gemini-3.1-pro-low", contents="x")
    except errors.ClientError as err:
        assert err.code == 401
        assert err.status == "UNAUTHENTICATED"
    else:
        raise AssertionError("a bad key must be refused")
