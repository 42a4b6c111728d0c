# shellcheck shell=bash
# Shared by bench/compare.sh and bench/grpc_compare.sh: starting and stopping `sluice serve`,
# and a process's CPU time. Source it after setting `run_dir` (a private temp dir); it defines
# `sluice_pid` (empty until started), and the caller's EXIT trap calls stop_sluice.

: "${run_dir:?set run_dir before sourcing bench/lib.sh}"
sluice_pid=""

# start_sluice BINARY ARGS...: runs `BINARY serve ARGS...` with its output in $run_dir/sluice.out
# and .err, and waits (at most 10 s) for it to print its config line, which it prints last when
# ready. Returns 1 if it exits or does not come up.
start_sluice() {
    local bin="$1"; shift
    # Emptied first: the background redirection may not have happened yet when the wait below
    # first looks, and a previous server's output must not pass for this one's.
    : >"$run_dir/sluice.out"
    : >"$run_dir/sluice.err"
    "$bin" serve "$@" >"$run_dir/sluice.out" 2>"$run_dir/sluice.err" &
    sluice_pid=$!
    for _ in $(seq 1 200); do
        grep -q '^sluice: config' "$run_dir/sluice.out" 2>/dev/null && return 0
        kill -0 "$sluice_pid" 2>/dev/null || break
        sleep 0.05
    done
    cat "$run_dir/sluice.err" >&2
    echo "sluice did not come up (output in $run_dir)" >&2
    return 1
}

# stop_sluice: SIGTERM to the pid we started, SIGKILL after 5 s.
stop_sluice() {
    [ -n "$sluice_pid" ] && kill -0 "$sluice_pid" 2>/dev/null || return 0
    kill -TERM "$sluice_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$sluice_pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$sluice_pid" 2>/dev/null || true
    wait "$sluice_pid" 2>/dev/null || true
}

# sluice_address WHAT: the HOST:PORT sluice printed for "data plane", "admin" or "grpc".
sluice_address() { sed -n "s/^sluice: $1 listening on //p" "$run_dir/sluice.out"; }

# cpu_ticks PID...: utime+stime (fields 14 and 15 of /proc/PID/stat) summed over the pids, in
# clock ticks (getconf CLK_TCK per second). Fields are counted after the ")" that closes the
# command name, which may contain spaces.
cpu_ticks() {
    local total=0 pid t
    for pid in "$@"; do
        t="$(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12 + $13}')"
        total=$((total + t))
    done
    echo "$total"
}

# cpu_ticks_split PID...: "UTIME STIME", each summed over the pids, in clock ticks: the server's
# own code against the kernel's work on its behalf (system calls, TCP on loopback).
cpu_ticks_split() {
    local user=0 sys=0 pid u s
    for pid in "$@"; do
        read -r u s < <(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12, $13}')
        user=$((user + u)) sys=$((sys + s))
    done
    echo "$user $sys"
}

# against_nginx_session: for a run of sluice beside the nginx anchor (compare.sh, fixed_load.sh),
# with `nginx_dir` and `nginx_started` set: on exit, stops sluice and (once nginx_started=1)
# nginx; refuses to start when NGINX_PORT, SLUICE_PORT or SLUICE_ADMIN_PORT is already taken.
against_nginx_session() {
    trap against_nginx_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local p
    for p in "$NGINX_PORT" "$SLUICE_PORT" "$SLUICE_ADMIN_PORT"; do
        ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null ||
            die "port $p is already in use on 127.0.0.1; not benchmarking someone else's server"
    done
}
against_nginx_cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_sluice
    if [ "$nginx_started" = 1 ]; then "$ANCHORS/nginx/run.sh" stop "$nginx_dir" >&2 || true; fi
    rm -rf -- "$nginx_dir/tmp"
    exit "$rc"
}
