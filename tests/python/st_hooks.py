"""Schemathesis hooks (tests/schemathesis.rs loads them with SCHEMATHESIS_HOOKS):
a reader for NDJSON streams, and a filter for the requests the server
rightly refuses or fails that a generator cannot tell from the document.

Ollama's streams (`/api/chat`, `/api/generate`) are NDJSON: one object per
line, the last with `done: true`. Schemathesis has no reader for that media
type; this one checks the framing and gives the last object to the
response-schema check: the `done` object (it carries the most fields,
`done_reason` and the statistics), or the error object that ends a stream
whose generation failed after it began.
"""

import json

import schemathesis


@schemathesis.deserializer("application/x-ndjson")
def ndjson(ctx, response):
    lines = [line for line in response.content.splitlines() if line.strip()]
    if not lines:
        raise ValueError("an NDJSON stream with no object")
    objects = [json.loads(line) for line in lines]
    if "error" in objects[-1]:
        # A failure after the stream began ends it with Ollama's error object.
        return objects[-1]
    done = [i for i, o in enumerate(objects) if o.get("done") is True]
    if done != [len(objects) - 1]:
        raise ValueError(f"`done: true` must be on the last object only, found on lines {done} of {len(objects)}")
    return objects[-1]


@schemathesis.hook
def filter_body(ctx, body):
    """Leaves out requests for structured output: the simulated model never
    writes JSON, so each ends in the documented 500 `invalid_response_format`
    (docs/api.md, "Structured output"), which the no-5xx check would count."""
    if not isinstance(body, dict):
        return True
    if body.get("response_format") is not None or body.get("format") is not None:
        return False
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    return not (isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema"))


@schemathesis.hook
def map_case(ctx, case):
    """Holds a generated valid body to the three rules JSON Schema cannot
    state, which the document says in words and the server refuses (400):
    each function name once, a `tool_choice` naming a function of `tools`,
    and `max_tokens` and `max_completion_tokens` equal when both are given.
    A generator draws short names that repeat, a `tool_choice` name that
    matches nothing and two unrelated limits; without this, schemathesis
    would take each such body for a valid one refused. Invalid bodies are
    left as drawn."""
    meta = getattr(case, "meta", None)
    if meta is not None and meta.generation.mode.is_positive and isinstance(case.body, dict):
        keep_tool_rules(case.body)
        keep_one_limit(case.body)
    return case


def keep_one_limit(body):
    """A chat's two names for its token limit say the same (request/mod.rs)."""
    if body.get("max_tokens") is not None and body.get("max_completion_tokens") is not None:
        body["max_completion_tokens"] = body["max_tokens"]


def named(item):
    """The object holding a tool's or a `tool_choice`'s function name, in any
    of the APIs' shapes: `{"function": {"name"}}` (chat, Ollama) or
    `{"name"}` (Responses, Messages)."""
    if not isinstance(item, dict):
        return None
    return item["function"] if isinstance(item.get("function"), dict) else item


def keep_tool_rules(body):
    names = []
    for i, tool in enumerate(body.get("tools") if isinstance(body.get("tools"), list) else []):
        holder = named(tool)
        name = holder.get("name") if holder is not None else None
        if not isinstance(name, str):
            continue
        k = 0
        while name in names:
            # Still 1 to 64 of `A-Z a-z 0-9 _ -`.
            name, k = f"{holder['name'][:50]}_{i}_{k}", k + 1
        holder["name"] = name
        names.append(name)
    choice = named(body.get("tool_choice"))
    kind = body["tool_choice"].get("type") if choice is not None else None
    if kind in ("function", "tool") and names and choice.get("name") not in names:
        choice["name"] = names[0]
