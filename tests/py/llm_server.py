"""llm_server: a scripted OpenAI-compatible chat endpoint on loopback, for the tests of the llm agent
(test_llm.py drives `kiln llm-try` with it, test_optimize_llm.py `kiln optimize --llm-url`).

`Server(script)` listens on 127.0.0.1 (port 0), answers GET <base>/models with one model,
"test-model", and each POST with the next step of the script (then with prose once the script is
spent), and records every request it received: path, Authorization header, raw body and parsed
body. Steps:

  ("kernel", SOURCE)            a chat completion whose message holds SOURCE in a ```c block
  ("prose",)                    a chat completion without any code
  ("slow", SECONDS)             prose, after SECONDS (a client timeout fires first)
  ("status", CODE, MESSAGE)     HTTP CODE with {"error": {"message": MESSAGE}}
  ("echo_key",)                 HTTP 401 whose message quotes the Authorization header
  ("huge_stream",)              a 3 MiB body without Content-Length
  ("huge_declared",)            a Content-Length of 64 MiB
  ("garbage", BYTES)            HTTP 200 with BYTES as the body

Every completion reports usage.total_tokens = the server's `tokens`.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROSE = ("Use a two-pass algorithm with shared memory; it will be much faster than the "
         "reference.")


def completion(content: str, tokens: int) -> bytes:
    return json.dumps({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": tokens - 100, "completion_tokens": 100, "total_tokens": tokens},
    }).encode()


class Scripted(BaseHTTPRequestHandler):
    """Answers each POST with the next step of the server's script; records every request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes, length: bool = True, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": "test-model"}]}).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self):
        srv = self.server
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        with srv.lock:
            srv.requests.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                 "raw": raw.decode("utf-8", "replace"), "body": json.loads(raw)})
            step = srv.script.pop(0) if srv.script else ("prose",)
        kind = step[0]
        if kind == "kernel":
            self._send(200, completion(f"Here is the kernel.\n\n```c\n{step[1]}```\n\nIt is fast.",
                                       srv.tokens))
        elif kind == "prose":
            self._send(200, completion(PROSE, srv.tokens))
        elif kind == "slow":
            time.sleep(step[1])
            self._send(200, completion(PROSE, srv.tokens))
        elif kind == "status":
            self._send(step[1], json.dumps({"error": {"message": step[2]}}).encode())
        elif kind == "echo_key":
            msg = f"invalid api key in header '{self.headers.get('Authorization')}'"
            self._send(401, json.dumps({"error": {"message": msg}}).encode())
        elif kind == "huge_stream":  # no Content-Length: the cap is met while reading
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                self.wfile.write(b'{"choices":[{"message":{"content":"')
                chunk = b"x" * 65536
                for _ in range(48):  # 3 MiB
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
        elif kind == "huge_declared":  # a Content-Length over the cap: refused before the body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(64 << 20))
            self.end_headers()
            try:
                self.wfile.write(b"{" * 4096)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
        elif kind == "garbage":
            self._send(200, step[1], ctype="application/octet-stream")
        else:
            raise AssertionError(f"unknown step {step}")


class Server:
    """The endpoint, as a context manager: `with Server(script) as srv: ... srv.url ...`."""

    def __init__(self, script, tokens=1000):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
        self.httpd.daemon_threads = True
        self.httpd.script = list(script)
        self.httpd.requests = []
        self.httpd.lock = threading.Lock()
        self.httpd.tokens = tokens
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list:
        return self.httpd.requests


def without_proxies(env: dict) -> dict:
    """env without the proxy variables, so that curl reaches the loopback server directly."""
    env = dict(env)
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                  "all_proxy"):
        env.pop(proxy, None)
    return env


def user_prompt(request: dict) -> str:
    """The user message of a recorded chat request (kiln sends a system and a user message)."""
    msgs = request["body"]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user"], msgs
    return msgs[1]["content"]
