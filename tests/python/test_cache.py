"""The conversation cache through the official SDK: a follow-up turn reports
the reused prompt tokens in `usage.prompt_tokens_details.cached_tokens`, and
every reply is the one the cache-off daemon gives (the simulator's reply
depends on its whole context, as a model's does)."""

from __future__ import annotations

import json

from conftest import MODEL_ID
from test_tools import QUESTION, SCRIPT, TOOL_RESULT, TOOLS

SPEC = "sim:qwen2.5-1.5b?time_scale=0.05&reply_tokens=10"
USERS = ["Hello there!", "What runs on the NPU?", "How fast is it?", "Thanks."]


def converse(client) -> list[tuple[str, int, int]]:
    """Four turns resending the history with the daemon's own replies: (reply, prompt_tokens, cached_tokens)."""
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    turns = []
    for user in USERS:
        messages.append({"role": "user", "content": user})
        c = client.chat.completions.create(model=MODEL_ID, messages=messages)
        reply = c.choices[0].message.content
        turns.append((reply, c.usage.prompt_tokens, c.usage.prompt_tokens_details.cached_tokens))
        messages.append({"role": "assistant", "content": reply})
    return turns


def test_follow_ups_reuse_the_cache_and_replies_do_not_change(start_daemon):
    on = start_daemon(model=SPEC)
    off = start_daemon(model=SPEC, extra_args=("--conversation-cache", "off"))
    with on.client() as a, off.client() as b:
        cached, plain = converse(a), converse(b)
    assert [t[0] for t in cached] == [t[0] for t in plain]
    assert [t[1] for t in cached] == [t[1] for t in plain], "prompt_tokens counts the whole prompt"
    assert [t[2] for t in plain] == [0, 0, 0, 0]
    assert cached[0][2] == 0
    assert all(0 < t[2] < t[1] for t in cached[1:]), cached


def test_a_tool_call_and_its_result_give_the_same_answer_with_the_cache(start_daemon, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    spec = f"sim:instant?script={script}"
    answers = []
    for extra in ((), ("--conversation-cache", "off")):
        d = start_daemon(model=spec, extra_args=extra)
        with d.client() as c:
            first = c.chat.completions.create(model=MODEL_ID, messages=QUESTION, tools=TOOLS)
            (call,) = first.choices[0].message.tool_calls
            follow = [
                *QUESTION,
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT},
            ]
            final = c.chat.completions.create(model=MODEL_ID, messages=follow, tools=TOOLS)
            left = first.usage.prompt_tokens + first.usage.completion_tokens
            answers.append((final.choices[0].message.content, final.usage.prompt_tokens_details.cached_tokens, left))
    (with_cache, cached, left), (without, uncached, _) = answers
    assert with_cache == without
    assert uncached == 0
    # The template writes the call back exactly as the model wrote it, so the
    # whole first turn (prompt and the generated call) is reused.
    assert cached == left


def test_a_thinking_reply_resent_by_the_sdk_without_its_reasoning_is_reused(start_daemon, tmp_path):
    """The SDK's message keeps `content` only; a Qwen3 template drops earlier
    reasoning anyway. The cache holds the reasoning and still serves the turn."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"match": "second", "reply": "<think>\nShorter.\n</think>\n\nTwo."},
        {"match": "first", "reply": "<think>\nLet me think about it.\n</think>\n\nOne."},
    ]))
    d = start_daemon(model=f"sim:instant?script={script}", extra_args=("--template", "qwen3"))
    with d.client() as c:
        messages = [{"role": "user", "content": "The first question"}]
        first = c.chat.completions.create(model=MODEL_ID, messages=messages)
        assert first.choices[0].message.content == "One."
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "The second one"}]
        follow = c.chat.completions.create(model=MODEL_ID, messages=messages)
    assert follow.choices[0].message.content == "Two."
    whole = first.usage.prompt_tokens + first.usage.completion_tokens
    assert follow.usage.prompt_tokens_details.cached_tokens == whole, follow.usage


def test_concurrent_conversations_keep_their_batch_slots_through_the_sdk(start_daemon):
    """Four conversations at once on `--batch 4`: each keeps a batch slot, so
    once the first runs have settled every follow-up reuses its history,
    and every reply is the cache-off daemon's."""
    from concurrent.futures import ThreadPoolExecutor

    on = start_daemon(model=SPEC, extra_args=("--batch", "4", "--batch-gather-ms", "1000"))
    off = start_daemon(model=SPEC, extra_args=("--conversation-cache", "off"))

    def talk(daemon):
        with daemon.client() as client:
            return converse(client)

    with ThreadPoolExecutor(4) as pool:
        batched = list(pool.map(talk, [on] * 4))
    plain = talk(off)
    for turns in batched:
        assert [t[0] for t in turns] == [t[0] for t in plain], "the replies of a cache-off daemon"
        assert [t[1] for t in turns] == [t[1] for t in plain], "prompt_tokens counts the whole prompt"
        # The first run starts alone and the others clear the slots once; from
        # the third turn on every conversation is in its own slot.
        assert all(0 < t[2] < t[1] for t in turns[2:]), turns
