"""Tool calls and reasoning through the official SDK: a full round trip
(tools -> tool_calls -> tool result -> final answer), streamed and not, and
reasoning_content as the SDK exposes it. The simulated runtime replies from a
script keyed on prompt text, so the final answer appears only if the tool
result reached the prompt."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL_ID

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"],
            },
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
TOOL_RESULT = "22 degrees and sunny"
ANSWER = "It is 22 degrees and sunny in Paris."
SCRIPT = [
    # First match wins: the follow-up prompt contains both texts.
    {"match": TOOL_RESULT, "reply": ANSWER},
    {"match": "weather in Paris", "reply": CALL},
    {"match": "add two and two", "reply": "<think>Two plus two is four.</think>\n\nFour."},
]
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    from conftest import DaemonManager

    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    mgr = DaemonManager()
    d = mgr.start(model=f"sim:instant?script={path}")
    yield d
    mgr.stop_all()


@pytest.fixture
def sdk(scripted):
    c = scripted.client()
    yield c
    c.close()


def _follow_up(message, call_id: str) -> list[dict]:
    """The conversation after the model's call, with the tool's result."""
    return [*QUESTION, message, {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT}]


def test_round_trip_non_stream(sdk):
    c = sdk.chat.completions.create(model=MODEL_ID, messages=QUESTION, tools=TOOLS)
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.id.startswith("call_") and len(call.id) > len("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}

    messages = _follow_up(choice.message.model_dump(exclude_none=True), call.id)
    final = sdk.chat.completions.create(model=MODEL_ID, messages=messages, tools=TOOLS)
    assert final.choices[0].message.content == ANSWER
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].finish_reason == "stop"


def test_round_trip_stream_with_sdk_accumulation(sdk):
    # The raw chunks: the call's first delta carries index, id, type and name;
    # the rest carry index and a fragment of the arguments.
    fragments, heads = [], []
    for chunk in sdk.chat.completions.create(model=MODEL_ID, messages=QUESTION, tools=TOOLS, stream=True):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            assert tc.index == 0
            if tc.id is not None:
                heads.append((tc.id, tc.type, tc.function.name))
            else:
                assert tc.type is None and tc.function.name is None
            fragments.append(tc.function.arguments)
    assert len(heads) == 1 and heads[0][1:] == ("function", "get_weather")
    assert len(fragments) > 5, "arguments arrive token by token"
    assert json.loads("".join(fragments)) == {"city": "Paris", "unit": "celsius"}

    # The SDK's own stream helper accumulates the deltas into a completion.
    with sdk.chat.completions.stream(model=MODEL_ID, messages=QUESTION, tools=TOOLS) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.id != heads[0][0], "ids are unique per call"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}

    messages = _follow_up(
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude={"parsed_arguments"}, exclude_none=True)]},
        call.id,
    )
    with sdk.chat.completions.stream(model=MODEL_ID, messages=messages, tools=TOOLS) as stream:
        text = "".join(e.delta for e in stream if e.type == "content.delta")
        final = stream.get_final_completion()
    assert text == ANSWER
    assert final.choices[0].message.content == ANSWER
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls


def test_reasoning_content_visible_through_the_sdk(sdk):
    ask = [{"role": "user", "content": "Please add two and two."}]
    c = sdk.chat.completions.create(model=MODEL_ID, messages=ask)
    message = c.choices[0].message
    assert message.content == "Four."
    assert message.model_extra["reasoning_content"] == "Two plus two is four."
    assert getattr(message, "reasoning_content") == "Two plus two is four."

    reasoning, content = [], []
    for chunk in sdk.chat.completions.create(model=MODEL_ID, messages=ask, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
            content.append(delta.content or "")
    assert "".join(reasoning) == "Two plus two is four."
    assert "".join(content) == "Four."
    # Reasoning streams first, then the answer: no chunk mixes them here.
    last_reasoning = max(i for i, r in enumerate(reasoning) if r)
    first_content = min(i for i, c in enumerate(content) if c)
    assert last_reasoning < first_content
