# shellcheck shell=bash
# The benchmarks' additions to tests/lib.sh, which it sources (starting and stopping `sluice
# serve` by pid, ports, cleanup on exit, /metrics and JSON fields come from there): a process's
# CPU time, and the session of a run beside the nginx anchor. Source it after setting `sluice`
# (the binary).

# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"

# cpu_ticks PID...: utime+stime (fields 14 and 15 of /proc/PID/stat) summed over the pids, in
# clock ticks (getconf CLK_TCK per second); a pid that is gone counts nothing. Fields are counted
# after the ")" that closes the command name, which may contain spaces.
cpu_ticks() {
    local total=0 pid t
    for pid in "$@"; do
        [ -r "/proc/$pid/stat" ] || continue
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

# against_nginx_session NGINX_DIR: for a run of sluice beside the nginx anchor (compare.sh,
# fixed_load.sh) whose nginx lives in NGINX_DIR: refuses to start when NGINX_PORT, SLUICE_PORT
# or SLUICE_ADMIN_PORT is already taken (never benchmarking someone else's server); on exit,
# stops sluice (stop, by its pid PID) and then nginx, once nginx_started=1.
nginx_started=0
against_nginx_session() {
    nginx_dir=$1
    cleanup_hooks+=(stop_nginx_anchor)
    local p
    for p in "${NGINX_PORT:?}" "${SLUICE_PORT:?}" "${SLUICE_ADMIN_PORT:?}"; do
        ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null ||
            die "port $p is already in use on 127.0.0.1; not benchmarking someone else's server"
    done
}
stop_nginx_anchor() {
    [ -z "${PID:-}" ] || stop "$PID"
    if [ "$nginx_started" = 1 ]; then "${ANCHORS:?}/nginx/run.sh" stop "$nginx_dir" >&2 || true; fi
    rm -rf -- "$nginx_dir/tmp"
}
