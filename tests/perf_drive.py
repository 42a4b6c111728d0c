#!/usr/bin/env python3
"""A fixed number of HTTP requests to sluice, one at a time on one keep-alive connection.

Used by tests/perf_guard.sh, which counts the server's instructions per request with callgrind:
the count must not depend on timing, so the load is a fixed sequence (keys drawn from a seeded
generator), never a duration, and nothing is in flight when counting starts or stops.

  python3 tests/perf_drive.py --port P --mode auth --path /v1/auth/allow --keys 100000 \
      --warmup 300 --requests 2000 --on-start 'CMD' --on-end 'CMD'

Sends --warmup requests, runs --on-start (a shell command: the guard turns callgrind's
instrumentation on), sends --requests requests, runs --on-end, and prints one JSON line:
{"requests": N, "status": {"200": n, ...}}. Exits 1 when a reply is not --expect's status
(deny: every request but a key's first is 429) or the connection breaks.

Each request waits --gap-ms (1) first, so that the server is always back waiting when it comes:
then every request takes the same path through the server's event loop (with no pause, whether
a read finds the next request already there depends on timing, and the count moves by 2-3 %).

Modes: auth  GET PATH with "X-Key: k<i>" (forward-auth, as bench/compare.sh's wrk scripts)
       check POST /v1/check with {"domain":"bench","descriptors":[{"entries":[
             {"key":"generic_key","value":"allow"},{"key":"key","value":"k<i>"}]}]}
Keys: k1 when --keys is 1, else k<i> with i uniform in 1..keys from a generator seeded --seed.
"""

import argparse
import json
import random
import socket
import subprocess
import sys
import time


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=["auth", "check"], default="auth")
    p.add_argument("--path", default="/v1/auth/allow")
    p.add_argument("--keys", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup", type=int, default=300)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--expect", choices=["allow", "deny"], default="allow")
    p.add_argument("--gap-ms", type=float, default=1.0)
    p.add_argument("--on-start", default="")
    p.add_argument("--on-end", default="")
    return p.parse_args()


class Connection:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed by the server")
        self.buf += chunk

    def roundtrip(self, request):
        """Sends one request, reads its response; returns the status code."""
        self.sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"connection" and value.strip().lower() == b"close":
                raise ConnectionError("the server closed the keep-alive connection")
            elif name == b"transfer-encoding":
                raise ConnectionError("chunked replies are not expected here")
        while len(self.buf) < length:
            self._fill()
        self.buf = self.buf[length:]
        return status


def main():
    args = parse_args()
    rng = random.Random(args.seed)
    host_header = f"{args.host}:{args.port}"

    def next_key():
        return "k1" if args.keys <= 1 else f"k{rng.randint(1, args.keys)}"

    def render(key):
        if args.mode == "auth":
            return (f"GET {args.path} HTTP/1.1\r\nHost: {host_header}\r\n"
                    f"X-Key: {key}\r\n\r\n").encode()
        body = ('{"domain":"bench","descriptors":[{"entries":[{"key":"generic_key",'
                f'"value":"allow"}},{{"key":"key","value":"{key}"}}]}}]}}')
        return (f"POST /v1/check HTTP/1.1\r\nHost: {host_header}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                f"{body}").encode()

    # Rendered before any is sent: the client's pace between requests stays even.
    total = args.warmup + args.requests
    requests = [render(next_key()) for _ in range(total)]
    conn = Connection(args.host, args.port)
    counts = {}
    seen = set()
    bad = 0
    for i, request in enumerate(requests):
        if i == args.warmup and args.on_start:
            subprocess.run(args.on_start, shell=True, check=True)
        if args.gap_ms > 0:
            time.sleep(args.gap_ms / 1000)
        status = conn.roundtrip(request)
        if i >= args.warmup:
            counts[str(status)] = counts.get(str(status), 0) + 1
        if args.expect == "allow":
            bad += status != 200
        else:
            first = request not in seen
            seen.add(request)
            bad += status != (200 if first else 429)
    if args.on_end:
        subprocess.run(args.on_end, shell=True, check=True)
    print(json.dumps({"requests": args.requests, "status": counts}))
    if bad:
        print(f"perf_drive: {bad} replies were not the expected {args.expect}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
