"""Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`)
through the official `anthropic` SDK: text with a system prompt, thinking
blocks, a tool round trip (tool_use -> tool_result -> answer) with
`messages.create` and `messages.stream`, the token limit, usage with cache
reads, token counting, and errors in Anthropic's shape."""

from __future__ import annotations

import json

import anthropic
import pytest

from conftest import MODEL_ID

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOL_RESULT = "22 degrees and sunny"
ANSWER = "It is 22 degrees and sunny in Paris."
SCRIPT = [
    {"match": TOOL_RESULT, "reply": ANSWER},
    {"match": "weather in Paris", "reply": CALL},
    {"match": "add two and two", "reply": "<think>Two plus two is four.</think>\n\nFour."},
    {"match": "Be brief.", "reply": "Brief it is, and here is a long tail."},
]
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    from conftest import DaemonManager

    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    mgr = DaemonManager()
    d = mgr.start(model=f"sim:qwen2.5-1.5b?time_scale=0&script={path}")
    yield d
    mgr.stop_all()


@pytest.fixture
def sdk(daemon):
    c = anthropic.Anthropic(base_url=daemon.base_url.removesuffix("/v1"), api_key="unused", max_retries=0)
    yield c
    c.close()


def test_text_with_a_system_prompt(sdk):
    m = sdk.messages.create(model=MODEL_ID, max_tokens=64, system="Be brief.",
                            messages=[{"role": "user", "content": "Hello"}])
    assert (m.role, m.stop_reason) == ("assistant", "end_turn")
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == "Brief it is, and here is a long tail."
    assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0
    assert m.usage.cache_read_input_tokens == 0


def test_a_stop_sequence_is_named(sdk):
    kwargs = dict(model=MODEL_ID, max_tokens=64, system="Be brief.", stop_sequences=["nothing", ", and"],
                  messages=[{"role": "user", "content": "Hello"}])
    m = sdk.messages.create(**kwargs)
    assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", ", and")
    assert m.content[0].text == "Brief it is"
    with sdk.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    assert (streamed.stop_reason, streamed.stop_sequence, streamed.content[0].text) == ("stop_sequence", ", and", "Brief it is")
    # The reply's own end is not a stop sequence.
    m = sdk.messages.create(**{**kwargs, "stop_sequences": ["nothing"]})
    assert (m.stop_reason, m.stop_sequence) == ("end_turn", None)


def test_the_token_limit(sdk):
    m = sdk.messages.create(model=MODEL_ID, max_tokens=2, system="Be brief.",
                            messages=[{"role": "user", "content": "Hello"}])
    assert (m.stop_reason, m.usage.output_tokens) == ("max_tokens", 2)


def test_thinking_blocks(sdk):
    m = sdk.messages.create(model=MODEL_ID, max_tokens=64, messages=[{"role": "user", "content": "Please add two and two"}])
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert (m.content[0].thinking, m.content[1].text) == ("Two plus two is four.", "Four.")


def test_a_follow_up_reads_the_cache_and_counts_alike(sdk):
    first = [{"role": "user", "content": "Hello"}]
    m = sdk.messages.create(model=MODEL_ID, max_tokens=64, system="Be brief.", messages=first)
    history = [*first, {"role": "assistant", "content": [b.model_dump() for b in m.content]},
               {"role": "user", "content": "And then?"}]
    follow = sdk.messages.create(model=MODEL_ID, max_tokens=64, system="Be brief.", messages=history)
    # The first turn was reused from the conversation cache, and input_tokens leaves it out.
    assert follow.usage.cache_read_input_tokens > 0
    counted = sdk.messages.count_tokens(model=MODEL_ID, system="Be brief.", messages=history).input_tokens
    assert follow.usage.input_tokens + follow.usage.cache_read_input_tokens == counted


def test_a_tool_round_trip_created_and_streamed(sdk):
    m = sdk.messages.create(model=MODEL_ID, max_tokens=64, messages=[QUESTION], tools=TOOLS)
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", {"city": "Paris"})
    history = [QUESTION, {"role": "assistant", "content": [b.model_dump() for b in m.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}]}]
    final = sdk.messages.create(model=MODEL_ID, max_tokens=64, messages=history, tools=TOOLS)
    assert (final.content[0].text, final.stop_reason) == (ANSWER, "end_turn")

    with sdk.messages.stream(model=MODEL_ID, max_tokens=64, messages=[QUESTION], tools=TOOLS) as stream:
        kinds = [e.type for e in stream]
        streamed = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    (use,) = [b for b in streamed.content if b.type == "tool_use"]
    assert (use.input, streamed.stop_reason) == ({"city": "Paris"}, "tool_use")
    history[1] = {"role": "assistant", "content": [b.model_dump() for b in streamed.content]}
    history[2]["content"][0]["tool_use_id"] = use.id
    with sdk.messages.stream(model=MODEL_ID, max_tokens=64, messages=history, tools=TOOLS) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == ANSWER == final.content[0].text
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


def test_errors_have_anthropics_shape(sdk):
    with pytest.raises(anthropic.NotFoundError) as e:
        sdk.messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        sdk.messages.create(model=MODEL_ID, max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert "no vision support" in e.value.body["error"]["message"]


# Claude Code's first request, in the shape it sends to a model it does not
# know as Claude's (issue 33): its billing header as the first system block,
# a system message after the user's in `messages`, adaptive thinking with an effort, and
# `max_tokens: 32000` above the server's limit.
CLAUDE_CODE = dict(
    model=MODEL_ID,
    max_tokens=32000,
    system=[
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0.31; cc_entrypoint=cli; cch=7a3f1"},
        {"type": "text", "text": "You are a command-line agent.", "cache_control": {"type": "ephemeral"}},
    ],
    messages=[QUESTION, {"role": "system", "content": "Keep code lines short."}],
    tools=TOOLS,
    thinking={"type": "adaptive"},
    metadata={"user_id": "user_0a1b_account__session_2c3d"},
    extra_body={"output_config": {"effort": "medium"}},
)


def test_claude_codes_first_request_streams_a_tool_call(sdk):
    # The SDK wants a stream for a 32,000-token reply, or a time-out of one's own.
    raw = sdk.messages.with_raw_response.create(**CLAUDE_CODE, timeout=30)
    assert raw.headers["x-rkllmd-max-tokens-clamped"] == "32000->2048"
    m = raw.parse()
    assert m.stop_reason == "tool_use" and m.timings["max_tokens_clamped"] == {"requested": 32000, "limit": 2048}

    events = list(sdk.messages.create(**CLAUDE_CODE, stream=True))
    kinds = [e.type for e in events]
    assert (kinds[0], kinds[-2], kinds[-1]) == ("message_start", "message_delta", "message_stop"), kinds
    (start,) = [e for e in events if e.type == "content_block_start"]
    assert (start.content_block.type, start.content_block.name) == ("tool_use", "get_weather")
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert deltas and all(d.type == "input_json_delta" for d in deltas), deltas
    assert json.loads("".join(d.partial_json for d in deltas)) == {"city": "Paris"}
    assert kinds.index("content_block_stop") == len(kinds) - 3, kinds
    assert events[-2].delta.stop_reason == "tool_use"
    # The billing header is not part of the prompt: a request without it counts the same.
    counted = sdk.messages.count_tokens(model=MODEL_ID, system=CLAUDE_CODE["system"][1:], messages=CLAUDE_CODE["messages"],
                                        tools=TOOLS, thinking={"type": "adaptive"}).input_tokens
    usage = events[-2].usage
    assert usage.input_tokens + usage.cache_read_input_tokens == counted


def test_a_key_is_taken_as_x_api_key_or_bearer(start_daemon):
    d = start_daemon(api_key="sekrit")
    root = d.base_url.removesuffix("/v1")
    ask = dict(model=MODEL_ID, max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    for client in (anthropic.Anthropic(base_url=root, api_key="sekrit", max_retries=0),
                   anthropic.Anthropic(base_url=root, auth_token="sekrit", max_retries=0)):
        with client:
            assert client.messages.create(**ask).stop_reason in ("end_turn", "max_tokens")
    with anthropic.Anthropic(base_url=root, api_key="wrong", max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError):
            client.messages.create(**ask)
