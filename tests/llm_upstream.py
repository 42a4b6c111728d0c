#!/usr/bin/env python3
"""A fake LLM upstream for tests/llm_proxy_e2e.sh: answers POST /v1/... with a completion whose
usage is what the request's JSON body asks for in "use" (an integer, or absent: no usage at all).

  "stream": true   text/event-stream, chunked: a few text events 10 ms apart, then an event with
                   {"usage": {"total_tokens": use}}, then "data: [DONE]"
  otherwise        application/json {"choices": [...], "usage": {"total_tokens": use}}
  "header": true   the usage in the X-Tokens-Used header instead, body "ok"

Prints "llm: listening on 127.0.0.1:PORT"; counts the requests it served (GET /stats:
"requests=N"). Stops on SIGTERM.
"""
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

served = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_body(self, status, content_type, body, headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_body(200, "text/plain", f"requests={served}".encode())

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self):
        global served
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        with lock:
            served += 1
        use = request.get("use")
        usage = {} if use is None else {"usage": {"prompt_tokens": 0, "completion_tokens": use,
                                                  "total_tokens": use}}
        if request.get("header"):
            headers = [] if use is None else [("X-Tokens-Used", str(use))]
            return self.send_body(200, "text/plain", b"ok", headers)
        if not request.get("stream"):
            body = dict(choices=[{"message": {"content": "hello"}}], **usage)
            return self.send_body(200, "application/json", json.dumps(body).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for word in ("Hel", "lo", " there"):
            event = {"choices": [{"delta": {"content": word}}]}
            self.chunk(b"data: " + json.dumps(event).encode() + b"\n\n")
            time.sleep(0.01)
        if usage:
            self.chunk(b"data: " + json.dumps(dict(choices=[], **usage)).encode() + b"\n\n")
        self.chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
print(f"llm: listening on 127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
sys.exit(0)
