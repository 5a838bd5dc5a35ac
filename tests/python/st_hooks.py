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
    each function name once (a Responses namespace's joined to it), a
    `tool_choice` naming a function of `tools`, and `max_tokens` and
    `max_completion_tokens` equal when both are given. A generator draws
    short names that repeat, a `tool_choice` name that matches nothing and
    two unrelated limits; without this, schemathesis would take each such
    body for a valid one refused. Invalid bodies are left as drawn."""
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


def callable_tool(tool):
    """A tool the model can call: every chat, Ollama and Messages tool; of
    the Responses API's, a function (its `type` absent or null) or a custom
    tool, not a built-in one (`web_search`, …), which the server leaves out."""
    return isinstance(tool, dict) and tool.get("type") in (None, "function", "custom")


def callables(tools):
    """(name holder, namespace) of each tool the model sees, a Responses
    namespace's tools included: the model sees those as `NAMESPACE__NAME`,
    which must still be a function name (at most 64 characters), so both
    parts are cut short enough here."""
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            if isinstance(tool.get("name"), str):
                tool["name"] = tool["name"][:20]
            for inner in tool["tools"]:
                if callable_tool(inner) and isinstance(inner.get("name"), str):
                    inner["name"] = inner["name"][:40]
                    yield inner, tool.get("name")
        elif callable_tool(tool):
            yield named(tool), None


def keep_tool_rules(body):
    seen, first = [], None
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    for i, (holder, namespace) in enumerate(callables(tools)):
        name = holder.get("name") if holder is not None else None
        if not isinstance(name, str):
            continue
        flat = lambda n: f"{namespace}__{n}" if namespace else n
        k = 0
        while flat(name) in seen:
            # Still 1 to 64 of `A-Z a-z 0-9 _ -`.
            name, k = f"{holder['name'][:30]}_{i}_{k}", k + 1
        holder["name"] = name
        seen.append(flat(name))
        first = first or (name, namespace)
    choice = named(body.get("tool_choice"))
    kind = body["tool_choice"].get("type") if choice is not None else None
    if kind in ("function", "tool", "custom") and first is not None:
        namespace = choice.get("namespace")
        if (f"{namespace}__{choice.get('name')}" if namespace else choice.get("name")) not in seen:
            choice["name"] = first[0]
            if "namespace" in choice or first[1]:
                choice["namespace"] = first[1]
