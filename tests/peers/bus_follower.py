"""A subscriber in a process of its own: follows one execution's events on a NATS bus and
prints one JSON line per event (``{"seq": 3, "type": "agent.ready"}``) until ``count`` of
them, or the error that ended it (``{"error": "BusUnavailable"}``).

    python -m tests.peers.bus_follower URL EXECUTION_ID AFTER COUNT BACKEND
"""

from __future__ import annotations

import json
import sys

import anyio

from acpfsm.runtime.bus import BusError, NatsBus, event_type


async def follow(url: str, execution_id: str, after: int, count: int) -> None:
    async with (
        NatsBus(url, unavailable_after=2.0) as bus,
        bus.subscribe(execution_id, after=after) as sub,
    ):
        print(json.dumps({"subscribed": True}), flush=True)
        seen = 0
        try:
            async for item in sub:
                print(json.dumps({"seq": item.seq, "type": event_type(item.event)}), flush=True)
                seen += 1
                if seen >= count:
                    return
        except BusError as exc:
            print(json.dumps({"error": type(exc).__name__}), flush=True)


def main() -> None:
    url, execution_id, after, count, backend = sys.argv[1:6]
    anyio.run(follow, url, execution_id, int(after), int(count), backend=backend)


if __name__ == "__main__":
    main()
