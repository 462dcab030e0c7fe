"""An attacker of a local HTTP server: ``connection_flood.py HOST PORT COUNT [--chatty]``.

It opens up to ``COUNT`` TCP connections to the server (each connect bounded by 1 s), sends
nothing on them (``--chatty``: an unauthenticated ``POST /mcp`` on each every 0.2 s), prints
one JSON line ``{"opened": N}`` and holds them until its stdin closes. Then it looks at each
connection without waiting and prints ``{"refused": R, "closed": C, "open": O}``: ``refused``
were answered ``503`` and closed by the server, ``closed`` were closed without that answer,
``open`` are still open. A peer process of its own, so that its sockets do not count against
the file descriptors of the process under test.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

REQUEST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}"
)


def _state(sock: socket.socket, seen: bytes) -> str:
    sock.setblocking(False)
    data = seen
    while True:
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            return "refused" if b" 503 " in data.split(b"\r\n", 1)[0] else "open"
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return "refused" if b" 503 " in data.split(b"\r\n", 1)[0] else "closed"


def main() -> int:
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chatty = "--chatty" in sys.argv[4:]
    held: list[socket.socket] = []
    for _ in range(count):
        try:
            held.append(socket.create_connection((host, port), timeout=1.0))
        except OSError:
            break
    print(json.dumps({"opened": len(held)}), flush=True)
    stop = threading.Event()
    first_lines: dict[int, bytes] = {}

    def chatter() -> None:
        while not stop.wait(0.2):
            for index, sock in enumerate(held):
                try:
                    sock.settimeout(0.05)
                    sock.sendall(REQUEST)
                    reply = sock.recv(65536)
                    first_lines.setdefault(index, reply)
                except OSError:
                    continue

    thread = threading.Thread(target=chatter, daemon=True)
    if chatty:
        thread.start()
    sys.stdin.read()
    stop.set()
    if chatty:
        thread.join()
    counts = {"refused": 0, "closed": 0, "open": 0}
    for index, sock in enumerate(held):
        seen = first_lines.get(index, b"")
        # a chatty connection answered 401 and then closed counts as closed
        counts[_state(sock, b"" if b" 401 " in seen[:20] else seen)] += 1
    print(json.dumps(counts), flush=True)
    for sock in held:
        sock.close()
    time.sleep(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
