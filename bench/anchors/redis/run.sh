#!/usr/bin/env bash
# A throwaway redis-server for the anchors: loopback only, no RDB, no AOF.
#   run.sh start PORT    starts one in a fresh temp dir (daemonized)
#   run.sh stop PORT     stops it by its pid (checked to be redis-server) and removes the temp dir
# The temp dir's path is kept in ${SLUICE_ANCHOR_RUN:-/tmp/sluice-anchors}/redis-PORT.dir.
set -euo pipefail

run_root="${SLUICE_ANCHOR_RUN:-/tmp/sluice-anchors}"

die() { echo "redis/run.sh: $*" >&2; exit 1; }

start() {
    local port="$1" dir
    [[ "$port" =~ ^[0-9]+$ ]] || die "bad port: $port"
    command -v redis-server >/dev/null 2>&1 || die "redis-server not found (apt-get install -y redis-server)"
    mkdir -p "$run_root"
    if [ -s "$run_root/redis-$port.dir" ]; then
        dir="$(cat "$run_root/redis-$port.dir")"
        if [ -s "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
            die "already running on port $port (pid $(cat "$dir/redis.pid"))"
        fi
    fi
    dir="$(mktemp -d "${TMPDIR:-/tmp}/sluice-redis-$port.XXXXXX")"
    echo "$dir" > "$run_root/redis-$port.dir"
    redis-server --port "$port" --bind 127.0.0.1 --protected-mode yes \
        --save '' --appendonly no \
        --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
        --daemonize yes
    for _ in $(seq 1 100); do
        if [ -s "$dir/redis.pid" ] && \
           [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then
            echo "redis started: pid $(cat "$dir/redis.pid") port $port dir $dir"
            return 0
        fi
        sleep 0.05
    done
    cat "$dir/redis.log" >&2 || true
    die "redis did not come up on 127.0.0.1:$port"
}

stop() {
    local port="$1" dir pid
    [ -s "$run_root/redis-$port.dir" ] || { echo "redis: nothing recorded for port $port"; return 0; }
    dir="$(cat "$run_root/redis-$port.dir")"
    if [ -s "$dir/redis.pid" ]; then
        pid="$(cat "$dir/redis.pid")"
        if kill -0 "$pid" 2>/dev/null; then
            if ! tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'redis-server'; then
                die "pid $pid is not redis-server; not killing it"
            fi
            kill -TERM "$pid"
            for _ in $(seq 1 100); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.05
            done
            if kill -0 "$pid" 2>/dev/null; then
                kill -KILL "$pid" 2>/dev/null || true
                echo "redis killed: pid $pid"
            else
                echo "redis stopped: pid $pid"
            fi
        fi
    fi
    case "$dir" in
        */sluice-redis-"$port".*) rm -rf -- "$dir" ;;
    esac
    rm -f "$run_root/redis-$port.dir"
}

case "${1:-}" in
    start) [ $# -eq 2 ] || die "usage: run.sh start PORT"; start "$2" ;;
    stop)  [ $# -eq 2 ] || die "usage: run.sh stop PORT"; stop "$2" ;;
    *) die "usage: run.sh start PORT | run.sh stop PORT" ;;
esac
