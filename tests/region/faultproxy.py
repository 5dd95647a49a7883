"""A fault-injecting HTTP proxy in front of a moto S3 server, both on 127.0.0.1.

Clients (s3fs / aiobotocore) talk to the proxy; it forwards every request to
moto and, per a programmable schedule, answers it with a fault instead:

* ``"500"`` / ``"503"``: an S3 error response; the request never reaches moto;
* ``"500-after"``: the request reaches moto (and is applied), the client gets a 500;
* ``"reset"``: the connection is reset (SO_LINGER 0) before forwarding;
* ``"reset-after"``: the request is applied, then the connection is reset, so
  the client cannot know whether it landed;
* ``"truncate"``: the response's headers (with the full Content-Length) and
  half of its body are sent, then the connection is reset (a response without
  a body is reset instead);
* ``"short"``: half of the body under a Content-Length that agrees with it (a
  server that lies: no HTTP layer can notice, only a length check can);
* ``"restart"``: moto is stopped (the request dies with it) and started again
  on the same port a moment later; requests meanwhile are reset.

Faults are scheduled with :meth:`FaultProxy.inject` (the next requests that
match a predicate) or :meth:`FaultProxy.randomize` (each request with a
probability, from a seeded generator).  :attr:`FaultProxy.injected` counts
the faults delivered, by kind.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import random
import socket
import socketserver
import struct
import threading
import time
from typing import Callable

ERROR_BODIES = {
    500: b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
         b"<Message>We encountered an internal error. Please try again.</Message></Error>",
    503: b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>ServiceUnavailable</Code>"
         b"<Message>Service is unable to handle request.</Message></Error>",
}
KINDS = ("500", "503", "500-after", "reset", "reset-after", "truncate", "short", "restart")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Moto:
    """A ThreadedMotoServer on a fixed port that can be restarted (its state lives in
    the process, so objects survive a restart)."""

    def __init__(self):
        from moto.server import ThreadedMotoServer

        self._cls = ThreadedMotoServer
        self.port = free_port()
        self.server = None
        self.lock = threading.Lock()
        self.restarts = 0

    def start(self) -> None:
        with self.lock:
            self.server = self._cls(ip_address="127.0.0.1", port=self.port, verbose=False)
            self.server.start()

    def stop(self) -> None:
        with self.lock:
            if self.server is not None:
                self.server.stop()
                self.server = None

    def restart(self, down_seconds: float) -> bool:
        """Stop now; start again after ``down_seconds`` (in the background).  False
        (and nothing done) while a restart is already under way."""
        with self.lock:
            if self.server is None:
                return False
            self.server.stop()
            self.server = None
            self.restarts += 1

        def up():
            time.sleep(down_seconds)
            self.start()

        threading.Thread(target=up, daemon=True).start()
        return True

    def wait_up(self, timeout: float = 10.0) -> None:
        t_end = time.monotonic() + timeout
        while self.server is None and time.monotonic() < t_end:
            time.sleep(0.01)


class _Rule:
    __slots__ = ("kind", "when", "count")

    def __init__(self, kind: str, when: Callable[[str, str, dict], bool] | None, count: int):
        self.kind, self.when, self.count = kind, when, count


class FaultProxy:
    def __init__(self, moto: Moto, down_seconds: float = 0.3):
        self.moto = moto
        self.down_seconds = down_seconds
        self.lock = threading.Lock()
        self.rules: list[_Rule] = []
        self.rate = 0.0
        self.kinds: tuple[str, ...] = ()
        self.rng = random.Random(0)
        self.when_random: Callable[[str, str, dict], bool] | None = None
        self.injected: collections.Counter = collections.Counter()
        self.requests: collections.Counter = collections.Counter()
        self.log: list[tuple[str, str, str]] = []  # (fault, method, path) of every fault
        proxy = self

        class Handler(_Handler):
            pass

        Handler.proxy = proxy
        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "FaultProxy":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the schedule ---------------------------------------------------------------------
    def inject(self, kind: str, when: Callable[[str, str, dict], bool] | None = None, count: int = 1) -> None:
        """Answer the next ``count`` requests matching ``when(method, path, headers)`` with ``kind``
        (``headers``: lowercase names)."""
        assert kind in KINDS, kind
        with self.lock:
            self.rules.append(_Rule(kind, when, count))

    def randomize(self, rate: float, kinds=KINDS, seed: int = 0, when=None) -> None:
        """Fault each request (matching ``when``) with probability ``rate``, kind drawn from ``kinds``."""
        with self.lock:
            self.rate, self.kinds, self.rng, self.when_random = rate, tuple(kinds), random.Random(seed), when

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.rate = 0.0

    def pending(self) -> int:
        with self.lock:
            return sum(r.count for r in self.rules)

    @property
    def total_injected(self) -> int:
        return sum(self.injected.values())

    def _pick(self, method: str, path: str, headers: dict) -> str | None:
        with self.lock:
            self.requests[method] += 1
            for r in self.rules:
                if r.count > 0 and (r.when is None or r.when(method, path, headers)):
                    r.count -= 1
                    self.rules = [x for x in self.rules if x.count > 0]
                    return self._count(r.kind, method, path)
            if self.rate and (self.when_random is None or self.when_random(method, path, headers)):
                if self.rng.random() < self.rate:
                    return self._count(self.rng.choice(self.kinds), method, path)
        return None

    def _count(self, kind, method, path):
        self.injected[kind] += 1
        self.log.append((kind, method, path))
        return kind


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):  # resets are the point, not news
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self._forward()

    do_PUT = do_POST = do_HEAD = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        n = self.headers.get("Content-Length")
        if n is not None:
            return self.rfile.read(int(n))
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            out = bytearray()
            while True:  # forwarded as received: still chunked
                line = self.rfile.readline()
                out += line
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline()
                        out += t
                        if t in (b"\r\n", b"\n", b""):
                            return bytes(out)
                out += self.rfile.read(size + 2)
        return b""

    def _reset(self) -> None:
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _error(self, status: int) -> None:
        body = ERROR_BODIES[status]
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self) -> None:
        proxy = self.proxy
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        fault = proxy._pick(self.command, self.path, headers)
        if fault in ("500", "503"):
            return self._error(int(fault))
        if fault == "reset":
            return self._reset()
        if fault == "restart":
            proxy.moto.restart(proxy.down_seconds)
            return self._reset()
        try:
            up = http.client.HTTPConnection("127.0.0.1", proxy.moto.port, timeout=60)
            up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():
                up.putheader(k, v)
            up.endheaders(body or None)
            resp = up.getresponse()
            data = resp.read()
            up.close()
        except OSError:  # moto is down (restarting): like a refused connection
            return self._reset()
        if fault == "500-after":
            return self._error(500)
        if fault == "reset-after" or (fault in ("truncate", "short") and not data):
            return self._reset()
        if fault == "short":
            data = data[: len(data) // 2]
        self.send_response_only(resp.status, resp.reason)
        head = self.command == "HEAD"  # keeps the object's Content-Length, sends no body
        for k, v in resp.getheaders():
            if k.lower() not in _HOP_BY_HOP or (head and k.lower() == "content-length"):
                self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if head:
            return
        if fault == "truncate":
            self.wfile.write(data[: len(data) // 2])
            return self._reset()
        self.wfile.write(data)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
