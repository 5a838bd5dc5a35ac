"""Schemathesis hooks (tests/schemathesis.rs loads them with SCHEMATHESIS_HOOKS):
a reader for NDJSON streams, and a filter for structured-output requests.

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
