#!/usr/bin/env bash
# The rate-limiter-flexible anchor (node:http, server.js).
#   [RLF_STORE=memory|redis] [REDIS_PORT=N] run.sh start PORT
#   run.sh stop [PORT]      stop the instance on PORT, or every instance started here
# State (pid + log) lives in ${SLUICE_ANCHOR_RUN:-/tmp/sluice-anchors}/rlf-PORT.{pid,log}.
# Installs node_modules (npm install) on first use.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run_root="${SLUICE_ANCHOR_RUN:-/tmp/sluice-anchors}"

die() { echo "rlf/run.sh: $*" >&2; exit 1; }

# The app runs from $app: this folder when it is writable, else a copy under
# $run_root (a read-only checkout cannot hold node_modules).
app="$here"
ensure_deps() {
    command -v node >/dev/null 2>&1 || die "node not found (apt-get install -y nodejs npm)"
    if [ ! -w "$here" ]; then
        app="$run_root/rlf-app"
        mkdir -p "$app"
        cp "$here/server.js" "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$app/"
    fi
    if [ ! -d "$app/node_modules/rate-limiter-flexible" ] || [ ! -d "$app/node_modules/ioredis" ]; then
        command -v npm >/dev/null 2>&1 || die "npm not found (apt-get install -y npm)"
        echo "rlf: installing node_modules (npm ci) in $app" >&2
        (cd "$app" && npm ci --no-audit --no-fund --loglevel=error >&2)
    fi
}

start() {
    local port="$1" pidfile log pid
    [[ "$port" =~ ^[0-9]+$ ]] || die "bad port: $port"
    ensure_deps
    mkdir -p "$run_root"
    pidfile="$run_root/rlf-$port.pid"; log="$run_root/rlf-$port.log"
    if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        die "already running on port $port (pid $(cat "$pidfile"))"
    fi
    PORT="$port" RLF_STORE="${RLF_STORE:-memory}" REDIS_PORT="${REDIS_PORT:-6379}" \
        nohup node "$app/server.js" >"$log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" > "$pidfile"
    for _ in $(seq 1 200); do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$pidfile"; cat "$log" >&2; die "server exited during start"
        fi
        if grep -q 'listening' "$log" 2>/dev/null && \
           (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "rlf started: pid $pid port $port store ${RLF_STORE:-memory}"
            return 0
        fi
        sleep 0.05
    done
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$pidfile"; cat "$log" >&2
    die "server did not come up on 127.0.0.1:$port"
}

stop_pidfile() {
    local pidfile="$1" pid
    [ -s "$pidfile" ] || return 0
    pid="$(cat "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then
        # Only signal it if it is our server (pids get reused).
        if ! tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'server.js'; then
            echo "rlf: pid $pid is not server.js; not killing it" >&2
            rm -f "$pidfile"; return 0
        fi
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
            echo "rlf killed: pid $pid"
        else
            echo "rlf stopped: pid $pid"
        fi
    fi
    rm -f "$pidfile"
}

stop() {
    if [ $# -ge 1 ]; then
        stop_pidfile "$run_root/rlf-$1.pid"
    else
        local f
        for f in "$run_root"/rlf-*.pid; do
            [ -e "$f" ] && stop_pidfile "$f"
        done
    fi
    return 0
}

case "${1:-}" in
    start) [ $# -eq 2 ] || die "usage: run.sh start PORT"; start "$2" ;;
    stop)  shift; stop "$@" ;;
    *) die "usage: run.sh start PORT | run.sh stop [PORT]" ;;
esac
