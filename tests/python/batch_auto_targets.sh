#!/usr/bin/env bash
# Issue 36's rules for `batch = auto` (docs/performance.md, "batch = auto, the
# default"), side by side in one run: each round runs every case once, in
# turn, each on a fresh daemon (simulated Qwen2.5-1.5B at time_scale 0.25);
# ROUNDS rounds (default 3). A line per case and round: the case, then its
# figures as JSON. "accept" is a runtime that takes short batches
# (`short_batch=accept`), "refuse" the simulator's default. CHEAP=1 runs
# instead a runtime that refuses short batches but whose batch step costs 1 %
# more per active slot (`slot_cost=0.01`, against the default 15 %), at half
# the model's pace (`auto` times fillers only where a step takes >= 20 ms),
# against --batch 1 at that pace.
# Needs target/release/rkllmd (RKLLMD_BIN).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=${RKLLMD_BIN:-target/release/rkllmd}
S='sim:qwen2.5-1.5b?time_scale=0.25'
ROUNDS=${ROUNDS:-3}
port=${PORT_BASE:-18600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { # name, daemon args..., -- bench args...   (ONLY=REGEX runs the cases it matches)
  local name=$1; shift
  [[ -z ${ONLY:-} || $name =~ $ONLY ]] || return 0
  local dargs=() bargs=()
  while [[ $1 != -- ]]; do dargs+=("$1"); shift; done; shift; bargs=("$@")
  port=$((port+1))
  # Another engineer's daemon on the port would answer the health check and
  # the bench, ours failing to bind: take the next free one.
  while ss -ltn | grep -q "127.0.0.1:$port "; do port=$((port+1)); done
  $B "${dargs[@]}" --host 127.0.0.1 --port $port --queue-depth 64 2>"$work/$name.log" & local pid=$!
  until curl -sf http://127.0.0.1:$port/health/ready >/dev/null; do sleep 0.1; done
  local slots=$(curl -s http://127.0.0.1:$port/health | python3 -c 'import json,sys; print(json.load(sys.stdin)["runtime"]["batch"]["slots"])')
  $B bench --url http://127.0.0.1:$port --json "${bargs[@]}" > "$work/$name.json"
  kill $pid; wait $pid 2>/dev/null
  python3 - "$name" "$work/$name.json" "$slots" <<'PY'
import json, sys
name, path, slots = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = json.load(open(path)); l = r["levels"][0]
ok = [q for q in r["requests"] if q["ok"]]
follow = [q for q in ok if q["turn"] > 0]
out = {"slots": slots, "ok": len(ok), "failed": l["failed"],
       "ttft_p50": l["ttft_ms"]["p50"], "tpot_p50": l["tpot_ms"]["p50"], "tok_s": round(l["output_throughput"], 2)}
if follow:
    out["cached"] = f'{sum(1 for q in follow if (q.get("cached_tokens") or 0) > 0)}/{len(follow)}'
    last = l["by_turn"][-1]
    out["last_turn_ttft_p50"] = last["ttft_ms"]["p50"]
    out["last_turn_queue_p50"] = last["queue_ms"]["p50"]
    out["last_turn_prefill_p50"] = last["prefill_ms"]["p50"]
print(name, json.dumps(out), flush=True)
PY
}
conv() { echo --warmup 0 --prompt-tokens 100 --turns 6 --conversations $1 --requests $1 --output-tokens 32; }
if [[ -n ${CHEAP:-} ]]; then
  H='sim:qwen2.5-1.5b?time_scale=0.5'
  lone="--warmup 2 --concurrency 1 --requests 16 --prompt-tokens 100 --output-tokens 32"
  for round in $(seq "$ROUNDS"); do
    echo "# round $round"
    run conv6-auto-cheap --model "$H&slot_cost=0.01" -- $(conv 6)
    run conv6-b1-off --model "$H&slot_cost=0.01" --batch 1 --conversation-cache off -- $(conv 6)
    run conv4-auto-cheap --model "$H&slot_cost=0.01" -- $(conv 4)
    run conv8-auto-cheap --model "$H&slot_cost=0.01" -- $(conv 8)
    run lone-auto-cheap --model "$H&slot_cost=0.01" -- $lone
    run lone-b1 --model "$H&slot_cost=0.01" --batch 1 -- $lone
    run c8-auto-cheap --model "$H&slot_cost=0.01" -- --warmup 2 --concurrency 8 --requests 48 --prompt-tokens 64 --output-tokens 64
    run c8-b1 --model "$H&slot_cost=0.01" --batch 1 -- --warmup 2 --concurrency 8 --requests 48 --prompt-tokens 64 --output-tokens 64
  done
  exit 0
fi
for round in $(seq "$ROUNDS"); do
  echo "# round $round"
  # 6 conversations × 6 turns: the defaults against --batch 1 with the cache off.
  run conv6-auto-accept --model "$S&short_batch=accept" -- $(conv 6)
  run conv6-b1-off --model "$S&short_batch=accept" --batch 1 --conversation-cache off -- $(conv 6)
  run conv6-auto-refuse --model "$S" -- $(conv 6)
  run conv4-auto-accept --model "$S&short_batch=accept" -- $(conv 4)
  run conv4-auto-refuse --model "$S" -- $(conv 4)
  run conv8-auto-accept --model "$S&short_batch=accept" -- $(conv 8)
  run conv8-auto-refuse --model "$S" -- $(conv 8)
  # A lone client: TTFT and decode against --batch 1.
  lone="--warmup 2 --concurrency 1 --requests 16 --prompt-tokens 100 --output-tokens 32"
  run lone-auto-accept --model "$S&short_batch=accept" -- $lone
  run lone-b1 --model "$S&short_batch=accept" --batch 1 -- $lone
  run lone-auto-refuse --model "$S" -- $lone
  # Closed-loop clients: output throughput against --batch 1.
  run c8-auto-accept --model "$S&short_batch=accept" -- --warmup 2 --concurrency 8 --requests 48 --prompt-tokens 64 --output-tokens 64
  run c8-b1 --model "$S&short_batch=accept" --batch 1 -- --warmup 2 --concurrency 8 --requests 48 --prompt-tokens 64 --output-tokens 64
  run c2-auto-accept --model "$S&short_batch=accept" -- --warmup 2 --concurrency 2 --requests 24 --prompt-tokens 64 --output-tokens 64
  run c2-b1 --model "$S&short_batch=accept" --batch 1 -- --warmup 2 --concurrency 2 --requests 24 --prompt-tokens 64 --output-tokens 64
done
