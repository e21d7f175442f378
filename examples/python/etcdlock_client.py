"""A small client of `etcdlock serve`, standard library only.

    locks = Client("127.0.0.1", 7070)   # or Client(host, port, user=..., password=..., ssl_context=...)
    with locks.hold("billing/nightly", identity="report-job") as grant:
        store.put("report", data, token=grant.token)   # the resource checks the token

`hold` keeps one HTTP request open for as long as the lock is held
(POST /v1/hold). When the block ends it releases with DELETE /v1/holds/<id>,
which answers once the release has committed, so the next hold of the name
queues behind nothing, and both requests' connections are kept for the next
hold (holding in a loop costs no new connection). If this process dies, its
sockets close and the server releases the grant at once. `grant.lost` is set
when the server says the grant was lost (a `lost` line); stop writing then.
"""

import base64
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
    """A held lock: its name, fencing token (an int), key and hold id."""

    def __init__(self, first):
        self.name = first["name"]
        self.token = int(first["token"])
        self.key = first["key"]
        self.hold = first["hold"]
        self.lost = threading.Event()
        self.released = threading.Event()
        self.cause = None


def _error(resp):
    err = json.loads(resp.read() or b"{}")
    return LockError(err.get("code", "unavailable"), err.get("error", resp.reason))


def _follow(resp, grant):
    """Reads the stream's lines until it ends: sets grant.lost or grant.released."""
    try:
        for line in resp:
            event = json.loads(line).get("event")
            if event == "lost":
                grant.cause = json.loads(line).get("cause")
                grant.lost.set()
            elif event == "released":
                grant.released.set()
    except Exception:  # noqa: BLE001 - the connection was closed under it
        return


def _shut(conn):
    """Closes conn at once, even while another thread reads its socket."""
    if conn.sock is not None:
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    conn.close()


class Client:
    """Holds locks through one `etcdlock serve`, keeping its connections.

    Not safe for concurrent holds: use one Client per thread.
    """

    def __init__(self, host="127.0.0.1", port=7070, user=None, password=None, ssl_context=None):
        """user and password: an etcd user's, for a serve run with
        --client-auth etcd; ssl_context: HTTPS (serve's --cert-file)."""
        self.host, self.port = host, port
        self._headers = {}
        if user is not None:
            cred = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self._headers["Authorization"] = "Basic " + cred
        self._ssl = ssl_context
        self._stream = None  # the holds' connection, kept after a release
        self._control = None  # the releases' connection

    def _conn(self, attr):
        conn = getattr(self, attr)
        if conn is None:
            if self._ssl is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self.host, self.port)
            setattr(self, attr, conn)
        return conn

    def _release(self, grant):
        """DELETE /v1/holds/<id>; True once the server answered released."""
        conn = self._conn("_control")
        try:
            conn.request("DELETE", f"/v1/holds/{grant.hold}", headers=self._headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status == 200
        except (OSError, http.client.HTTPException):
            _shut(conn)
            self._control = None
            return False

    @contextmanager
    def hold(self, name, wait=None, ttl=None, identity=None, try_=False, kind=None, n=None):
        """Hold the lock `name` for the duration of the with block."""
        body = {"name": name, "try": try_}
        for key, value in (("wait", wait), ("ttl", ttl), ("identity", identity), ("kind", kind), ("n", n)):
            if value is not None:
                body[key] = value
        conn = self._conn("_stream")
        kept = False
        try:
            conn.request("POST", "/v1/hold", json.dumps(body), {"Content-Type": "application/json", **self._headers})
            resp = conn.getresponse()
            if resp.status != 200:
                raise _error(resp)
            grant = Grant(json.loads(resp.readline()))
            follower = threading.Thread(target=_follow, args=(resp, grant), daemon=True)
            follower.start()
            try:
                yield grant
            finally:
                # Released by the DELETE, the stream ends on its own and its
                # connection carries the next hold; else closing it releases.
                if not grant.lost.is_set() and self._release(grant):
                    follower.join(5)
                    kept = grant.released.is_set() and not follower.is_alive()
        finally:
            if not kept:
                _shut(conn)
                self._stream = None

    def close(self):
        """Closes the kept connections."""
        for attr in ("_stream", "_control"):
            conn = getattr(self, attr)
            if conn is not None:
                conn.close()
                setattr(self, attr, None)


@contextmanager
def hold(name, host="127.0.0.1", port=7070, **kwargs):
    """Hold the lock `name` for the with block, on a Client of its own."""
    client = Client(host, port)
    try:
        with client.hold(name, **kwargs) as grant:
            yield grant
    finally:
        client.close()
