"""Shared assertions for the wire format (docs/api.md) and the figures (docs/timings.md)."""

from __future__ import annotations

import json
import numbers
from typing import Any, Optional

import pytest

# Clock resolution / rounding allowance for sums of separately rounded figures.
MS_TOL = 1.0

TIMINGS_KEYS = (
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
    "queue_ms",
    "ttft_ms",
    "e2e_ms",
    "runtime",
)


def _is_num(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _walk_numbers(obj: Any, path: str = "timings"):
    if _is_num(obj):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk_numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk_numbers(v, f"{path}[{i}]")


def check_usage(usage: dict, completion_tokens: Optional[int] = None) -> None:
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert isinstance(usage.get(k), int), f"usage.{k} missing or not an int: {usage}"
    assert usage["prompt_tokens"] > 0, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    if completion_tokens is not None:
        assert usage["completion_tokens"] == completion_tokens, usage


def check_timings(timings: Any, usage: dict) -> None:
    """The invariants of docs/timings.md for one finished request."""
    assert isinstance(timings, dict), f"timings missing or not an object: {timings!r}"
    missing = [k for k in TIMINGS_KEYS if k not in timings]
    assert not missing, f"timings lacks {missing}: {timings}"

    for path, v in _walk_numbers(timings):
        assert v >= 0, f"{path} is negative: {v}"
        assert v == v and v not in (float("inf"), float("-inf")), f"{path} is not finite: {v}"

    n = timings["predicted_n"]
    assert isinstance(n, int), timings
    assert n == usage["completion_tokens"], f"predicted_n {n} != usage.completion_tokens {usage['completion_tokens']}"
    assert isinstance(timings["prompt_n"], int), timings
    assert 0 <= timings["prompt_n"] <= usage["prompt_tokens"], (timings, usage)

    queue_ms, e2e_ms = timings["queue_ms"], timings["e2e_ms"]
    assert _is_num(queue_ms) and _is_num(e2e_ms), timings
    assert queue_ms <= e2e_ms + MS_TOL, timings

    if n >= 1:
        ttft, prompt_ms = timings["ttft_ms"], timings["prompt_ms"]
        assert _is_num(ttft) and _is_num(prompt_ms), f"ttft_ms/prompt_ms must be numbers when a token came: {timings}"
        assert abs((queue_ms + prompt_ms) - ttft) <= MS_TOL, f"queue_ms + prompt_ms != ttft_ms: {timings}"
        assert ttft <= e2e_ms + 1e-6, f"ttft_ms > e2e_ms: {timings}"
    else:
        assert timings["ttft_ms"] is None and timings["prompt_ms"] is None, timings

    if n <= 1:
        # decode_ms / tpot_ms / decode_tps are undefined with fewer than two tokens: null, never 0 or inf.
        for k in ("predicted_ms", "predicted_per_token_ms", "predicted_per_second"):
            assert timings[k] is None, f"{k} must be null when predicted_n == {n}: {timings}"
    else:
        dec = timings["predicted_ms"]
        tpot = timings["predicted_per_token_ms"]
        tps = timings["predicted_per_second"]
        assert _is_num(dec) and _is_num(tpot) and _is_num(tps), timings
        assert dec <= e2e_ms + 1e-6, f"predicted_ms (decode) > e2e_ms: {timings}"
        assert dec + timings["ttft_ms"] <= e2e_ms + MS_TOL, f"ttft + decode > e2e: {timings}"
        assert tpot == pytest.approx(dec / (n - 1), rel=0.02, abs=0.01), f"tpot != decode_ms/(n-1): {timings}"
        if dec > 0:
            assert tps == pytest.approx((n - 1) / (dec / 1000.0), rel=0.02), f"decode tps != (n-1)/decode_s: {timings}"

    rt = timings["runtime"]
    if isinstance(rt, dict) and "generate_tokens" in rt:
        assert rt["generate_tokens"] == n, f"runtime.generate_tokens {rt['generate_tokens']} != predicted_n {n}"


def check_error_envelope(exc_or_response: Any, status: "int | tuple[int, ...]", *, param: Any = ..., code: Any = ...) -> dict:
    """`{"error":{"message","type","param","code"}}` with all four keys; returns the inner object."""
    response = getattr(exc_or_response, "response", exc_or_response)
    allowed = status if isinstance(status, tuple) else (status,)
    assert response.status_code in allowed, f"status {response.status_code} not in {allowed}: {response.text}"
    ctype = response.headers.get("content-type", "")
    assert ctype.startswith("application/json"), f"error body is not JSON ({ctype!r}): {response.text}"
    body = json.loads(response.text)
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    err = body["error"]
    for k in ("message", "type", "param", "code"):
        assert k in err, f"error envelope lacks {k!r}: {body}"
    assert isinstance(err["message"], str) and err["message"], body
    assert isinstance(err["type"], str) and err["type"], body
    if param is not ...:
        assert err["param"] == param, f"error.param {err['param']!r} != {param!r}: {body}"
    if code is not ...:
        assert err["code"] == code, f"error.code {err['code']!r} != {code!r}: {body}"
    return err


def parse_sse(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order. Comment lines are skipped;
    any other field name fails the test (clients silently drop such lines)."""
    assert "\r" not in text or "\r\n" in text, "stray CR in the SSE body"
    text = text.replace("\r\n", "\n")
    payloads = []
    for block in text.split("\n\n"):
        if not block.strip("\n"):
            continue
        data_lines = []
        for line in block.split("\n"):
            if line.startswith(":"):
                continue  # comment / keep-alive
            assert line.startswith("data:"), f"unexpected SSE line {line!r}"
            data_lines.append(line[5:][1:] if line[5:6] == " " else line[5:])
        if data_lines:
            payloads.append("\n".join(data_lines))
    return payloads
