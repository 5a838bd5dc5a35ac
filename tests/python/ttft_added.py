"""What a front end adds to the TTFT a client sees: streamed requests
alternately direct to a board and through the front end (interleaved pairs,
each on a new connection, so drift on a shared machine hits both alike);
TTFT = request sent to the first content event. Prints both medians and the
median of the paired differences.

    python ttft_added.py DIRECT_HOST:PORT PROXY_HOST:PORT PAIRS
"""

from __future__ import annotations

import http.client
import json
import statistics
import sys
import time

BODY = json.dumps({"model": "m", "stream": True, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})


def ttft_ms(host_port: str) -> float:
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200, response.status
    first = None
    for line in response:
        if first is None and line.startswith(b"data: ") and b'"content"' in line:
            first = time.perf_counter() - start
        if line.startswith(b"data: [DONE]"):
            break
    conn.close()
    assert first is not None, "no content event"
    return first * 1000


def main() -> None:
    direct, proxy, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    d, p = [], []
    for i in range(pairs):
        # Alternate which goes first, so neither path always follows the other.
        if i % 2:
            p.append(ttft_ms(proxy))
            d.append(ttft_ms(direct))
        else:
            d.append(ttft_ms(direct))
            p.append(ttft_ms(proxy))
    diff = statistics.median(b - a for a, b in zip(d, p))
    print(
        f"TTFT p50 direct {statistics.median(d):.2f} ms, through the front end {statistics.median(p):.2f} ms; "
        f"paired difference p50 {diff:.2f} ms ({pairs} pairs)"
    )


if __name__ == "__main__":
    main()
