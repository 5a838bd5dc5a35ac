#!/usr/bin/env bash
# The conversation cache's figures in docs/performance.md ("Many conversations:
# the targets, measured"), in one run: `rkllmd bench --turns --conversations`
# against a fresh daemon per case (simulated Qwen2.5-1.5B, time_scale 0.25);
# one line per case: follow-ups cached, share of the history the cache skipped,
# TTFT of the first and last turn (p50), the daemon's peak RSS and what
# /v1/models says it keeps warm. Needs target/release/rkllmd (RKLLMD_BIN).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=${RKLLMD_BIN:-target/release/rkllmd}
S='sim:qwen2.5-1.5b?time_scale=0.25'
THINK=$(mktemp); echo '[{"match": "", "reply": "<think>\nLet me think about this question for a while before I answer it.\n</think>\n\nHere is the answer, in a few plain words, with no more reasoning."}]' > $THINK
port=${PORT_BASE:-18400}
work=$(mktemp -d)
trap 'rm -rf "$work" "$THINK"' EXIT
run() { # name, daemon args..., -- bench args...   (ONLY=REGEX runs the cases it matches)
  local name=$1; shift
  [[ -z ${ONLY:-} || $name =~ $ONLY ]] || return 0
  local dargs=() bargs=()
  while [[ $1 != -- ]]; do dargs+=("$1"); shift; done; shift; bargs=("$@")
  port=$((port+1))
  # Another engineer's daemon on the port would answer the health check and
  # the bench, ours failing to bind: take the next free one.
  while ss -ltn | grep -q "127.0.0.1:$port "; do port=$((port+1)); done
  $B "${dargs[@]}" --host 127.0.0.1 --port $port 2>"$work/cm_$name.log" & local pid=$!
  until curl -sf http://127.0.0.1:$port/health/ready >/dev/null; do sleep 0.1; done
  $B bench --url http://127.0.0.1:$port --warmup 0 --prompt-tokens 100 --json "${bargs[@]}" > "$work/cm_$name.json"
  local rss=$(awk '/VmHWM/{print $2}' /proc/$pid/status)
  local warm=$(curl -s http://127.0.0.1:$port/v1/models | python3 -c 'import json,sys; d=json.load(sys.stdin)["data"][0]; print(json.dumps(d.get("conversations")))')
  kill $pid; wait $pid 2>/dev/null
  python3 - "$name" "$work/cm_$name.json" "$rss" "$warm" <<'PY'
import json, sys
name, path, rss, warm = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
r = json.load(open(path)); l = r["levels"][0]; bt = l["by_turn"]
reqs = [q for q in r["requests"] if q["ok"]]
follow = [q for q in reqs if q["turn"] > 0]
hits = sum(1 for q in follow if (q.get("cached_tokens") or 0) > 0)
# history skipped: cached / (previous turn's prompt + its reply) per follow-up
prev = {(q["prompt"], q["turn"]): q for q in reqs}
skips = []
for q in follow:
    p = prev.get((q["prompt"], q["turn"] - 1))
    if p and p.get("prompt_tokens") is not None and p.get("completion_tokens") is not None:
        hist = p["prompt_tokens"] + p["completion_tokens"]
        skips.append(min(1.0, (q.get("cached_tokens") or 0) / hist))
skips.sort()
med = skips[len(skips)//2] if skips else float("nan")
mn = skips[0] if skips else float("nan")
print(f"{name}: follow-ups cached {hits}/{len(follow)} ({100*hits/max(1,len(follow)):.0f} %); history skipped p50 {100*med:.0f} % min {100*mn:.0f} %; "
      f"last-turn TTFT p50 {bt[-1]['ttft_ms']['p50']:.1f} ms; first-turn {bt[0]['ttft_ms']['p50']:.1f} ms; peak RSS {int(rss)//1024} MiB; warm {warm}")
PY
}
run one24 --model "$S" -- --turns 12 --conversations 1 --requests 1 --output-tokens 24
run one32 --model "$S" -- --turns 12 --conversations 1 --requests 1 --output-tokens 32
run think24 --model "$S&script=$THINK" --template qwen3 -- --turns 12 --conversations 1 --requests 1 --output-tokens 24
run think32 --model "$S&script=$THINK" --template qwen3 -- --turns 12 --conversations 1 --requests 1 --output-tokens 32
for c in 2 4 6 8; do
  run on$c --model "$S" -- --turns 6 --conversations $c --requests $c --output-tokens 32
  run off$c --model "$S" --conversation-cache off -- --turns 6 --conversations $c --requests $c --output-tokens 32
done
# Batched decoding with a conversation per slot (engine/slots.rs), against the
# same batch size with the cache off and against off6 (batch 1, cache off).
run b4on4 --model "$S" --batch 4 -- --turns 6 --conversations 4 --requests 4 --output-tokens 32
run b4off4 --model "$S" --batch 4 --conversation-cache off -- --turns 6 --conversations 4 --requests 4 --output-tokens 32
run b8on6 --model "$S" --batch 8 -- --turns 6 --conversations 6 --requests 6 --output-tokens 32
run b8off6 --model "$S" --batch 8 --conversation-cache off -- --turns 6 --conversations 6 --requests 6 --output-tokens 32
# More live conversations than slots: the slots keep being cleared.
run b4on8 --model "$S" --batch 4 -- --turns 6 --conversations 8 --requests 8 --output-tokens 32
# The same on a runtime that takes batched runs with slots left without input
# (engine/short_batch.rs): an absent conversation's slot keeps it.
run b4on4s --model "$S&short_batch=accept" --batch 4 -- --turns 6 --conversations 4 --requests 4 --output-tokens 32
run b4on8s --model "$S&short_batch=accept" --batch 4 -- --turns 6 --conversations 8 --requests 8 --output-tokens 32
