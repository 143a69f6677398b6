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
    # the Codex backend stores nothing: the text is in the deltas and the done items, and
    # response.completed carries usage with an empty output (passed through untouched)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "HelloHelloHello"
    items = [e.item for e in events if e.type == "response.output_item.done"]
    assert items[0].content[0].text == "HelloHelloHello"
    done = events[-1].response
    assert done.usage.input_tokens_details.cached_tokens == 64
    assert done.usage.output_tokens == 7


def test_a_stream_cut_before_its_end_ends_with_an_error_event(gateway):
    # the upstream breaks off after its deltas: the client is told, not left with half an answer
    # (the pause lets the first delta leave the mock before the break, as on a real connection)
    cut = {"delta_delay_ms": 30, "steps": [{"kind": "abort", "after_deltas": 2}]}
    gateway.script(cut, ["sdk-codex"])
    try:
        events = list(client(gateway).responses.create(model="gpt-5.1-codex", input="Say hi", stream=True))
    finally:
        gateway.script({}, ["sdk-codex"])
    assert [e.type for e in events].count("response.output_text.delta") >= 1
    assert events[-1].type == "error"
    # (server_error: the code Codex retries; the cause is in the message)
    assert events[-1].code == "server_error"
    assert "upstream_stream_broken" in events[-1].message


def test_models_retrieve(gateway):
    assert client(gateway).models.retrieve("gpt-5.1-codex").id == "gpt-5.1-codex"
    # a chat client's model picker lists every family Chat Completions reaches
    listed = {m.id for m in client(gateway).models.list()}
    assert {"gpt-5.1-codex", "claude-opus-4-8", "gemini-3.1-pro-low"} <= listed, listed
    with pytest.raises(openai.NotFoundError) as err:
        client(gateway).models.retrieve("not-a-model")
    assert err.value.body["code"] == "model_not_found"


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
        # (no `store`: Codex's backend stores nothing, so SubLane sends `"store": false` for the
        # client, as over HTTP; the mock refuses a Codex turn without it, as the backend does)
        conn.response.create(model="gpt-5.1-codex", input="Say hi")
        first = []
        for event in conn:
            first.append(event)
            if event.type in ("response.completed", "error"):
                break
        assert first[-1].type == "response.completed", first[-1]
        assert "".join(e.delta for e in first if e.type == "response.output_text.delta") == "HelloHelloHello"
        conn.response.create(
            model="gpt-5.1-codex", input="again", store=False, previous_response_id=first[-1].response.id
        )
        second = []
        for event in conn:
            second.append(event)
            if event.type in ("response.completed", "error"):
                break
        assert second[-1].type == "response.completed", second[-1]
        assert second[-1].response.usage.output_tokens == 7
    # request ids ride along on created/completed events (extra fields the SDK keeps)
    assert str(getattr(first[0], "request_id", "")).startswith("req_")


def test_chat_completion_through_a_codex_account(gateway):
    """`chat.completions.create` (BEY-3): translated to Responses for the Codex account and back."""
    resp = client(gateway).chat.completions.create(
        model="gpt-5.1-codex",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}],
    )
    assert resp.object == "chat.completion"
    assert resp.choices[0].message.role == "assistant"
    assert resp.choices[0].message.content == "HelloHelloHello"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 120
    assert resp.usage.prompt_tokens_details.cached_tokens == 64


def test_streamed_chat_completion_with_usage(gateway):
    stream = client(gateway).chat.completions.create(
        model="gpt-5.1-codex",
        messages=[{"role": "user", "content": "Say hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "HelloHelloHello"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7


def test_chat_parameter_without_an_equivalent_is_a_bad_request(gateway):
    with pytest.raises(openai.BadRequestError) as err:
        client(gateway).chat.completions.create(
            model="gpt-5.1-codex", messages=[{"role": "user", "content": "x"}], stop=["\n"]
        )
    assert err.value.status_code == 400
    assert err.value.param == "stop"


WEATHER = [{
    "type": "function",
    "function": {"name": "weather", "description": "Weather by city",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}]


# Each account family of the pool, by the model that reaches it (a Claude model may also reach
# the Antigravity account until its model list is read: both are scripted alike).
FAMILIES = {
    "codex": ("gpt-5.1-codex", ("sdk-codex",)),
    "claude": ("claude-opus-4-8", ("sdk-claude", "sdk-antigravity")),
    "antigravity": ("gemini-3.1-pro-low", ("sdk-antigravity",)),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_completion_with_parallel_tool_calls(gateway, family):
    model, tokens = FAMILIES[family]
    calls = [{"name": "weather", "arguments": '{"city":"Paris"}'}, {"name": "weather", "arguments": '{"city":"Rome"}'}]
    gateway.script({"function_calls": calls}, tokens)
    try:
        c = client(gateway)
        ask = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris and Rome?"}]
        resp = c.chat.completions.create(model=model, messages=ask, tools=WEATHER)
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert [(t.function.name, t.function.arguments) for t in choice.message.tool_calls] == [
            ("weather", '{"city":"Paris"}'), ("weather", '{"city":"Rome"}')]

        # streamed, folded by the SDK's own helper
        with c.chat.completions.stream(model=model, messages=ask, tools=WEATHER) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
        streamed = final.choices[0]
        assert streamed.finish_reason == "tool_calls"
        assert [t.function.arguments for t in streamed.message.tool_calls] == ['{"city":"Paris"}', '{"city":"Rome"}']
        assert len({t.id for t in streamed.message.tool_calls}) == 2

        # the tool results go back as the next turn (each upstream's mock checks they answer the
        # calls: tool_use ids, function response counts, Gemini 3 thought signatures)
        follow = ask + [choice.message.model_dump(exclude_none=True)] + [
            {"role": "tool", "tool_call_id": t.id, "content": "sunny"} for t in choice.message.tool_calls]
        gateway.script({}, tokens)
        again = c.chat.completions.create(model=model, messages=follow, tools=WEATHER)
        assert again.choices[0].message.content == "HelloHelloHello"
    finally:
        gateway.script({}, tokens)


def test_chat_completion_through_a_claude_account(gateway):
    """A `claude-*` model goes to the pool's Claude account, translated to Messages and back."""
    c = client(gateway)
    ask = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi"}]
    resp = c.chat.completions.create(model="claude-opus-4-8", messages=ask, max_completion_tokens=64)
    assert resp.choices[0].message.content == "HelloHelloHello"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 120 and resp.usage.prompt_tokens_details.cached_tokens == 64
    chunks = list(c.chat.completions.create(model="claude-opus-4-8", messages=ask, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "HelloHelloHello"
    assert chunks[-1].usage.completion_tokens == 7


@pytest.mark.parametrize("model, token", [("claude-opus-4-8", "sdk-claude"), ("gemini-3.1-pro-low", "sdk-antigravity")])
def test_a_prompt_too_long_is_context_length_exceeded_whichever_family_refused(gateway, model, token):
    """A Chat Completions client of a Claude or an Antigravity account gets OpenAI's type and
    code for the refusal, and the upstream's numbers."""
    gateway.script({"steps": [{"kind": "context_too_long", "tokens": 210118, "limit": 200000}]}, [token])
    try:
        with pytest.raises(openai.BadRequestError) as err:
            client(gateway).chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hi"}])
    finally:
        gateway.script({}, [token])
    assert err.value.code == "context_length_exceeded"
    assert err.value.type == "invalid_request_error"
    assert err.value.body["message"] == "prompt is too long: 210118 tokens > 200000 maximum"
