"""A webhook receiver for the tests, on a free loopback port.

Usage: receiver.py SECRET_FILE GATE_FILE

Prints `{"port": N}` once listening, then one JSON line per call: its path,
its `webhook-id`, whether the signature verified (with the Standard
Webhooks reference library, under the secret in SECRET_FILE), the status it
answered, the body, and when it came (Unix seconds). It answers:

- `/fail-twice/...`: 500 to the first two calls on that path, then 200;
- `/gate/...`: 503 while GATE_FILE exists, then 200;
- any other path: 200.
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

SECRET_FILE, GATE_FILE = sys.argv[1], sys.argv[2]
with open(SECRET_FILE, encoding="utf-8") as f:
    VERIFIER = Webhook(f.read().strip())

seen = {}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        try:
            VERIFIER.verify(body, dict(self.headers.items()))
            verified = True
        except Exception:  # noqa: BLE001 - any failure is "not verified"
            verified = False
        with lock:
            calls = seen.get(self.path, 0)
            seen[self.path] = calls + 1
        if self.path.startswith("/fail-twice/") and calls < 2:
            status = 500
        elif self.path.startswith("/gate/") and os.path.exists(GATE_FILE):
            status = 503
        else:
            status = 200
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        record = {
            "path": self.path,
            "id": self.headers.get("webhook-id"),
            "verified": verified,
            "status": status,
            "body": parsed,
            "at": time.time(),
        }
        with lock:
            print(json.dumps(record), flush=True)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(json.dumps({"port": server.server_address[1]}), flush=True)
server.serve_forever()
