#!/usr/bin/env bash
# The nginx anchor: limit_req keyed on X-Key, one worker (nginx.conf.template).
#   run.sh start PORT DIR   writes DIR/nginx.conf from the template and starts nginx with prefix DIR
#   run.sh stop DIR         stops the nginx whose pid file is DIR/nginx.pid (its own pid, checked)
# Used by bench/compare.sh, bench/fixed_load.sh (through bench/lib.sh's cleanup) and compare.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "nginx/run.sh: $*" >&2; exit 1; }

find_nginx() {
    if command -v nginx >/dev/null 2>&1; then command -v nginx
    elif [ -x /usr/sbin/nginx ]; then echo /usr/sbin/nginx
    else die "nginx not found (apt-get install -y nginx-light)"; fi
}

start() {
    local port="$1" dir="$2"
    [[ "$port" =~ ^[0-9]+$ ]] || die "bad port: $port"
    mkdir -p "$dir/tmp"
    dir="$(cd "$dir" && pwd)"
    if [ -s "$dir/nginx.pid" ] && kill -0 "$(cat "$dir/nginx.pid")" 2>/dev/null; then
        die "already running in $dir (pid $(cat "$dir/nginx.pid"))"
    fi
    sed -e "s#@PORT@#$port#g" -e "s#@DIR@#$dir#g" \
        "$here/nginx.conf.template" > "$dir/nginx.conf"
    local bin; bin="$(find_nginx)"
    "$bin" -t -q -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf" \
        || die "config test failed (see $dir/error.log)"
    "$bin" -p "$dir/" -e "$dir/error.log" -c "$dir/nginx.conf"
    # The master daemonizes; wait for its pid file and for the port to answer.
    for _ in $(seq 1 100); do
        if [ -s "$dir/nginx.pid" ] && \
           (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "nginx started: pid $(cat "$dir/nginx.pid") port $port dir $dir"
            return 0
        fi
        sleep 0.05
    done
    die "nginx did not come up on 127.0.0.1:$port (see $dir/error.log)"
}

stop() {
    local dir="$1" pidfile="$1/nginx.pid" pid
    if [ ! -s "$pidfile" ]; then echo "nginx: no pid file in $dir"; return 0; fi
    pid="$(cat "$pidfile")"
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "nginx: pid $pid not running"; rm -f "$pidfile"; return 0
    fi
    # Only signal it if it really is an nginx master (pids get reused).
    if ! tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'nginx'; then
        die "pid $pid is not nginx; not killing it"
    fi
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { echo "nginx stopped: pid $pid"; rm -f "$pidfile"; return 0; }
        sleep 0.05
    done
    # Still alive after 5 s: kill the master and its workers by pid.
    local kids=()
    read -r -a kids <<<"$(ps -o pid= --ppid "$pid" 2>/dev/null | tr '\n' ' ')"
    kill -KILL "$pid" "${kids[@]}" 2>/dev/null || true
    echo "nginx killed: pid $pid ${kids[*]}"
    rm -f "$pidfile"
}

case "${1:-}" in
    start) [ $# -eq 3 ] || die "usage: run.sh start PORT DIR"; start "$2" "$3" ;;
    stop)  [ $# -eq 2 ] || die "usage: run.sh stop DIR"; stop "$2" ;;
    *) die "usage: run.sh start PORT DIR | run.sh stop DIR" ;;
esac
