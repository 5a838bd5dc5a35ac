"""OpenAI's Responses API (`/v1/responses`) through the official SDK's
`responses.create` and `responses.stream`: text, reasoning items, a tool round
trip (function_call -> function_call_output -> answer), the token limit, the
stateless server's refusal of `previous_response_id`, and Codex CLI's tool
loop (streamed, `store: false`, the whole input resent each turn, built-in
and namespaced tools beside its shell tool). The simulated runtime replies
from a script keyed on prompt text."""

from __future__ import annotations

import json

import openai
import pytest

from conftest import MODEL_ID

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOL_RESULT = "22 degrees and sunny"
ANSWER = "It is 22 degrees and sunny in Paris."
SHELL_TOOLS = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}},
            "required": ["command"],
        },
    },
    {"type": "web_search"},
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Helper agents.",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}],
    },
]
SHELL_CALL = '<tool_call>\n{"name": "shell", "arguments": {"command": ["ls", "-a"]}}\n</tool_call>'
LISTING = "Cargo.toml\nsrc\ntests"
SHELL_ANSWER = "The repository has Cargo.toml, src and tests."
SCRIPT = [
    {"match": LISTING, "reply": SHELL_ANSWER},
    {"match": "List the files", "reply": SHELL_CALL},
    {"match": TOOL_RESULT, "reply": ANSWER},
    {"match": "weather in Paris", "reply": CALL},
    {"match": "add two and two", "reply": "<think>Two plus two is four.</think>\n\nFour."},
    {"match": "Be brief.", "reply": "Brief it is, and here is a long tail."},
]
QUESTION = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def sdk(tmp_path_factory):
    from conftest import DaemonManager

    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    mgr = DaemonManager()
    d = mgr.start(model=f"sim:instant?script={path}")
    c = d.client()
    yield c
    c.close()
    mgr.stop_all()


def test_text_with_instructions(sdk):
    r = sdk.responses.create(model=MODEL_ID, instructions="Be brief.", input="Hello")
    assert r.status == "completed"
    assert r.output_text == "Brief it is, and here is a long tail."
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens == 0


def test_the_token_limit_makes_it_incomplete(sdk):
    r = sdk.responses.create(model=MODEL_ID, instructions="Be brief.", input="Hello", max_output_tokens=2)
    assert (r.status, r.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    assert r.usage.output_tokens == 2


def test_reasoning_comes_as_its_own_item(sdk):
    r = sdk.responses.create(model=MODEL_ID, input="Please add two and two")
    kinds = [item.type for item in r.output]
    assert kinds == ["reasoning", "message"], kinds
    assert r.output[0].content[0].text == "Two plus two is four."
    assert r.output_text == "Four."


def test_a_tool_round_trip(sdk):
    r = sdk.responses.create(model=MODEL_ID, input=QUESTION, tools=TOOLS)
    (call,) = [item for item in r.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    follow_up = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in r.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT},
    ]
    final = sdk.responses.create(model=MODEL_ID, input=follow_up, tools=TOOLS)
    assert final.output_text == ANSWER


def test_streamed_text_and_tool_round_trip(sdk):
    with sdk.responses.stream(model=MODEL_ID, input="Please add two and two") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.reasoning_text.delta" in kinds and "response.output_text.delta" in kinds
    assert final.output_text == "Four."

    with sdk.responses.stream(model=MODEL_ID, input=QUESTION, tools=TOOLS) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.function_call_arguments.delta")
        final = stream.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert json.loads(call.arguments) == json.loads(deltas) == {"city": "Paris"}
    follow_up = [
        {"role": "user", "content": QUESTION},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT},
    ]
    with sdk.responses.stream(model=MODEL_ID, input=follow_up, tools=TOOLS) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert text == ANSWER == stream.get_final_response().output_text


def test_previous_response_id_is_refused(sdk):
    with pytest.raises(openai.BadRequestError) as e:
        sdk.responses.create(model=MODEL_ID, input="Hello", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"


def test_codex_tool_loop_streamed_with_the_whole_input_resent(sdk):
    """As Codex CLI runs its shell tool: streamed, `store: false`, its own
    fields (`include`, `reasoning.summary`, `prompt_cache_key`,
    `parallel_tool_calls`) and a built-in tool that is left out, not refused;
    the second turn resends everything and reuses the first from the cache."""
    codex = dict(
        model=MODEL_ID,
        instructions="You are a coding agent. Use the shell tool to inspect the workspace.",
        tools=SHELL_TOOLS,
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "medium", "summary": "auto"},
        parallel_tool_calls=False,
        prompt_cache_key="codex-session-1",
        stream=True,
    )
    history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files, please."}]}]
    events = list(sdk.responses.create(input=history, **codex))
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"], kinds
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    first = events[-1].response
    (call,) = first.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "shell", {"command": ["ls", "-a"]})

    history += [call.model_dump(exclude_none=True), {"type": "function_call_output", "call_id": call.call_id, "output": LISTING}]
    events = list(sdk.responses.create(input=history, **codex))
    kinds = [e.type for e in events]
    for kind in ("response.content_part.added", "response.output_text.done", "response.content_part.done"):
        assert kind in kinds, kinds
    final = events[-1].response
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == SHELL_ANSWER
    assert final.output_text == SHELL_ANSWER
    reused = final.usage.input_tokens_details.cached_tokens
    assert reused == first.usage.input_tokens + first.usage.output_tokens, (reused, first.usage)


def test_input_of_reasoning_items_alone_is_refused_naming_input(sdk):
    # Reasoning belongs to the assistant turn after it: with none, there is nothing to answer.
    with pytest.raises(openai.BadRequestError) as e:
        sdk.responses.create(model=MODEL_ID, input=[{"type": "reasoning", "summary": []}])
    assert e.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as e:
        sdk.responses.create(model=MODEL_ID, input=[])
    assert e.value.body["param"] == "input"
    # With instructions there is a message to answer.
    reply = sdk.responses.create(model=MODEL_ID, input=[], instructions="Say hello.")
    assert reply.output_text
