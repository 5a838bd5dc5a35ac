#!/usr/bin/env bash
# Three simulated boards on loopback behind a shipped front-end config
# (docs/examples/), for the figures in docs/deploy.md:
#
#   boards_bench.sh conversations haproxy-affinity.cfg
#       6 conversations x 6 turns (conversations_bench.py, X-Session-Id,
#       0-1.5 s think time), simulated Qwen2.5-1.5B at time_scale 0.25;
#       haproxy.cfg for the plain one. (tests/front_ends.rs measures the
#       affinity configs the same way in CI.)
#   boards_bench.sh added haproxy.cfg|nginx.conf
#       client-side TTFT direct to a board vs through the front end,
#       400 interleaved pairs (ttft_added.py), simulator without pacing.
#
# Needs HAProxy and nginx (Debian's packages), target/release/rkllmd and .venv.
# Extra arguments go to conversations_bench.py (e.g. --prefix b).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MODE=$1 CONFIG=$2
shift 2
BIN=${RKLLMD_BIN:-target/release/rkllmd}
PY=.venv/bin/python
case $MODE in
    conversations) SPEC='sim:qwen2.5-1.5b?time_scale=0.25' ;;
    added) SPEC='sim:instant?reply_tokens=4' ;;
    *) echo "mode: conversations | added" >&2; exit 2 ;;
esac
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for n in 1 2 3; do
    "$BIN" --model "$SPEC" --model-id m --instance "board$n" --host 127.0.0.1 --port $((18080 + n)) 2>"$work/board$n.log" &
    pids+=($!)
done
# The examples' board addresses and listen lines, moved to loopback.
addresses=(-e 's/192.168.1.31:8080/127.0.0.1:18081/' -e 's/192.168.1.32:8080/127.0.0.1:18082/'
    -e 's/192.168.1.33:8080/127.0.0.1:18083/')
for n in 1 2 3; do
    until curl -sf "http://127.0.0.1:$((18080 + n))/health/ready" >/dev/null; do sleep 0.2; done
done
case $CONFIG in
    haproxy*)
        sed "${addresses[@]}" -e 's/bind :8080/bind 127.0.0.1:18090/' "docs/examples/$CONFIG" >"$work/haproxy.cfg"
        /usr/sbin/haproxy -f "$work/haproxy.cfg" -db >"$work/proxy.log" 2>&1 &
        ;;
    nginx*)
        sed "${addresses[@]}" -e 's/listen 80;/listen 127.0.0.1:18090;/' "docs/examples/$CONFIG" >"$work/rkllmd.conf"
        cat >"$work/nginx.conf" <<CONF
daemon off;
master_process off;
pid $work/nginx.pid;
error_log stderr notice;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $work/body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    include $work/rkllmd.conf;
}
CONF
        /usr/sbin/nginx -e stderr -p "$work" -c "$work/nginx.conf" 2>"$work/proxy.log" &
        ;;
esac
pids+=($!)
# Ready through the front end on every board: its health checks have run.
for _ in 1 2 3 4 5 6; do
    until curl -sf -o /dev/null http://127.0.0.1:18090/health/ready; do sleep 0.2; done
done
case $MODE in
    conversations)
        $PY tests/python/conversations_bench.py http://127.0.0.1:18090 m --conversations 6 --turns 6 \
            --max-tokens 32 --session-header --think 1.5 "$@" ;;
    added) $PY tests/python/ttft_added.py 127.0.0.1:18081 127.0.0.1:18090 400 ;;
esac
