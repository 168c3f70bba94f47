"""Child processes of the suite: `python worker.py ROLE URL NAME ...`."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import tenure


def count(url: str, name: str, counter: Path, times: int) -> None:
    """Increments the number in `counter` `times` times, each under the lease."""
    client = tenure.Client(tenure.open(url))
    for _ in range(times):
        with client.acquire(name, ttl="10s", timeout="120s") as lease:
            value = int(counter.read_text())
            time.sleep(0.001)  # a window for a second writer, if the lease let one in
            counter.write_text(str(value + 1))
            assert not lease.lost


def hold(url: str, name: str) -> None:
    """Takes the lease with a short TTL, says its token, and sleeps (to be killed)."""
    lease = tenure.Client(tenure.open(url)).acquire(name, ttl="2s", timeout="30s")
    print(lease.token, flush=True)
    time.sleep(600)


def wait(url: str, name: str) -> None:
    """Waits for the lease for ever; says `interrupted` on KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    client = tenure.Client(tenure.open(url))
    print("waiting", flush=True)
    try:
        client.acquire(name, ttl="10s", timeout=None)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(3)
    print("acquired", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    role, url, name, *rest = sys.argv[1:]
    if role == "count":
        count(url, name, Path(rest[0]), int(rest[1]))
    elif role == "hold":
        hold(url, name)
    elif role == "wait":
        wait(url, name)
    else:
        raise SystemExit(f"unknown role {role}")
