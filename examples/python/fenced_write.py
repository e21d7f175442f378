"""Two writers take turns under one lock and write through a fenced store.

Usage: python3 fenced_write.py HOST:PORT NAME

The store keeps the highest token it has admitted and refuses lower ones,
which is what makes the lock safe for data: a writer that lost the lock
while paused comes back with an old token and is refused.
"""

import sys
import threading

from etcdlock_client import Client, LockError


class FencedStore:
    def __init__(self):
        self.mu = threading.Lock()
        self.highest = 0
        self.log = []

    def put(self, value, token):
        with self.mu:
            if token < self.highest:
                raise ValueError(f"stale token {token} < {self.highest}")
            self.highest = token
            self.log.append((token, value))


def main():
    host, port = sys.argv[1].rsplit(":", 1)
    name = sys.argv[2]
    store = FencedStore()
    tokens = []
    locks = Client(host, int(port))  # its connections carry every hold below
    for writer in ("first", "second"):
        with locks.hold(name, identity=writer, wait="30s") as grant:
            store.put(writer, grant.token)
            tokens.append(grant.token)
    try:
        store.put("late", tokens[0])  # the first writer, late: refused
        print("FAIL: a stale token was admitted")
        return 1
    except ValueError as e:
        print("refused:", e)
    try:
        # The second hold's release answered once it had committed, so a
        # try of the name now is granted at once.
        with locks.hold(name, try_=True):
            pass
    except LockError as e:
        print("unexpected:", e)
        return 1
    locks.close()
    print("tokens", tokens[0], "<", tokens[1], "ok" if tokens[0] < tokens[1] else "FAIL")
    return 0 if tokens[0] < tokens[1] else 1


if __name__ == "__main__":
    sys.exit(main())
