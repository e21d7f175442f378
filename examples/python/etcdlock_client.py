"""A small client of `etcdlock serve`, standard library only.

    with hold("billing/nightly", identity="report-job") as grant:
        store.put("report", data, token=grant.token)   # the resource checks the token

`hold` keeps one HTTP request open for as long as the lock is held
(POST /v1/hold): the server releases the grant at once when the block ends,
or when this process dies and its socket closes. `grant.lost` is set when
the server says the grant was lost (a `lost` line); stop writing then.
"""

import http.client
import json
import socket
import threading
from contextlib import contextmanager


class LockError(Exception):
    """An error answer of the server: code is one of its error codes."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code


class Grant:
    """A held lock: its name, fencing token (an int) and key."""

    def __init__(self, first):
        self.name = first["name"]
        self.token = int(first["token"])
        self.key = first["key"]
        self.lost = threading.Event()
        self.cause = None


@contextmanager
def hold(name, host="127.0.0.1", port=7070, wait=None, ttl=None, identity=None, try_=False, kind=None, n=None):
    """Hold the lock `name` for the duration of the with block."""
    body = {"name": name, "try": try_}
    for key, value in (("wait", wait), ("ttl", ttl), ("identity", identity), ("kind", kind), ("n", n)):
        if value is not None:
            body[key] = value
    conn = http.client.HTTPConnection(host, port)
    try:
        conn.request("POST", "/v1/hold", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            err = json.loads(resp.read() or b"{}")
            raise LockError(err.get("code", "unavailable"), err.get("error", resp.reason))
        grant = Grant(json.loads(resp.readline()))

        def follow():
            try:
                for line in resp:
                    event = json.loads(line)
                    if event.get("event") == "lost":
                        grant.cause = event.get("cause")
                        grant.lost.set()
                        return
            except Exception:  # noqa: BLE001 - the with block closed the connection under it
                return

        threading.Thread(target=follow, daemon=True).start()
        yield grant
    finally:
        # Closing the request releases the grant. shutdown() sends the FIN
        # at once, even while the follow thread still reads the socket.
        if conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        conn.close()
