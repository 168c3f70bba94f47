"""What the issue asks the Python package to show, on every store."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import pytest

import tenure
from conftest import Server, StoreUnderTest

WORKER = str(Path(__file__).with_name("worker.py"))


def worker(*args: str) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE, text=True)


def test_counter_torture(store: StoreUnderTest, tmp_path: Path) -> None:
    """N processes x M increments of a file under one lease: none is lost."""
    processes, times = (4, 25) if store.kind == "dir" else (3, 10)
    counter = tmp_path / "counter"
    counter.write_text("0")
    name = store.name("counter")
    procs = [worker("count", store.url, name, str(counter), str(times)) for _ in range(processes)]
    for p in procs:
        assert p.wait(timeout=300) == 0
    assert int(counter.read_text()) == processes * times


def test_takeover_after_a_sigkilled_holder(store: StoreUnderTest) -> None:
    """A holder killed with SIGKILL is taken over once its TTL runs out, with a higher token."""
    name = store.name("takeover")
    holder = worker("hold", store.url, name)
    assert holder.stdout is not None
    token = int(holder.stdout.readline())
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    client = tenure.Client(tenure.open(store.url))
    with pytest.raises(tenure.Busy):
        client.try_acquire(name, ttl="10s")
    # The wait is bounded by the timeout: a lease that never expired would raise Timeout.
    with client.acquire(name, ttl="10s", timeout="30s") as lease:
        assert lease.token > token


def test_lost_lease_is_signalled(store: StoreUnderTest) -> None:
    """A lease broken by someone else turns lost: `lost`, `wait_lost`, `on_lost`."""
    name = store.name("lost")
    mine = tenure.Client(tenure.open(store.url))
    admin = tenure.Client(tenure.open(store.url))
    heard: list[str] = []
    called = threading.Event()

    def on_lost(reason: str) -> None:
        heard.append(reason)
        called.set()

    with mine.acquire(name, ttl="2s") as lease:
        lease.on_lost(on_lost)
        assert lease.wait_lost(timeout=0.1) is None
        assert not lease.lost and lease.health == "held" and lease.time_left > 0
        assert admin.break_(name, reason="test") == [lease.token]
        reason = lease.wait_lost(timeout="10s")
        assert reason is not None and "broken" in reason, reason
        assert lease.lost and lease.loss_reason == reason and lease.time_left == 0
        assert called.wait(5) and heard == [reason]
    # The next holder learns its token is above the broken one.
    with admin.try_acquire(name, ttl="10s") as next_lease:
        assert next_lease.token > lease.token


def test_asyncio_cancellation_leaves_no_grant_behind(store: StoreUnderTest) -> None:
    """A waiter cancelled while it waits holds nothing, then or later."""
    name = store.name("cancel")

    async def scenario() -> None:
        holder = tenure.Client(await tenure.open_async(store.url))
        waiter = tenure.Client(await tenure.open_async(store.url))
        lease = await holder.acquire_async(name, ttl="5s")
        task = asyncio.ensure_future(waiter.acquire_async(name, ttl="10s", timeout=None))
        await asyncio.sleep(0.5)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await lease.release_async()
        # Had the cancelled waiter got the lease, it would hold it for 10 s.
        await asyncio.sleep(0.5)
        again = await holder.acquire_async(name, ttl="10s", timeout=0)
        assert again.token > lease.token
        assert await again.release_async()

    asyncio.run(scenario())
    state = tenure.Client(tenure.open(store.url)).inspect(name)
    assert state.holders == []


def test_ctrl_c_while_waiting_raises_keyboard_interrupt(store: StoreUnderTest) -> None:
    """SIGINT to a process waiting for a lease raises KeyboardInterrupt at once; nothing is left held."""
    name = store.name("sigint")
    client = tenure.Client(tenure.open(store.url))
    lease = client.acquire(name, ttl="5s")
    waiting = worker("wait", store.url, name)
    assert waiting.stdout is not None
    assert waiting.stdout.readline().strip() == "waiting"
    time.sleep(1.0)
    # Interrupted while the lease is still held here: it did not wait for it.
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=10) == 3
    assert waiting.stdout.read().strip() == "interrupted"
    assert lease.release()
    time.sleep(0.3)
    with client.try_acquire(name, ttl="10s") as again:
        assert again.token > lease.token


def test_multi_lease_and_shared(store: StoreUnderTest) -> None:
    a, b = store.name("a"), store.name("b")
    client = tenure.Client(tenure.open(store.url))
    other = tenure.Client(tenure.open(store.url))
    with client.acquire_all([b, a], ttl="10s", timeout="10s") as leases:
        assert leases.names == sorted([a, b])
        assert set(leases.tokens) == {a, b}
        with pytest.raises(tenure.Busy):
            other.try_acquire(a, ttl="10s")
    with client.acquire(a, shared=True, ttl="10s") as one, other.acquire(a, shared=True, ttl="10s", timeout="5s") as two:
        assert one.shared and two.shared
        assert len(client.inspect(a).holders) == 2


def test_witness_verifies_with_the_servers_key(lease_server: Optional[Server], tmp_path: Path) -> None:
    if lease_server is None:
        pytest.skip("the tenure command is not built")
    url = f"tenure://127.0.0.1:{lease_server.port}"
    client = tenure.Client(tenure.open(url))
    with client.acquire("witnessed/job", ttl="5s", timeout="10s") as lease:
        assert lease.witness is not None
        w = tenure.verify_witness(lease_server.public_key, lease.witness)
        assert (w.name, w.token, w.mode, w.kind) == ("witnessed/job", lease.token, "exclusive", "grant")
        assert w.authorizes_writes
        # The key as 32 bytes works the same.
        assert tenure.verify_witness(bytes.fromhex(lease_server.public_key), lease.witness).token == lease.token
        # One byte changed anywhere, or another key: refused, never trusted.
        for i in (0, len(lease.witness) // 2, len(lease.witness) - 1):
            bad = bytearray(lease.witness)
            bad[i] ^= 1
            with pytest.raises(tenure.WitnessError):
                tenure.verify_witness(lease_server.public_key, bytes(bad))
        other = "%064x" % (int(lease_server.public_key, 16) ^ 1)
        with pytest.raises(tenure.WitnessError):
            tenure.verify_witness(other, lease.witness)
        with pytest.raises(tenure.WitnessError):
            tenure.verify_witness("not hex", lease.witness)
        with pytest.raises(tenure.WitnessError):
            tenure.verify_witness(lease_server.public_key, b"")


def test_slots_hold_at_most_n(store: StoreUnderTest) -> None:
    """slots=2: two holders at once, each on a slot lease of its own; a third is busy."""
    name = store.name("slots")
    clients = [tenure.Client(tenure.open(store.url)) for _ in range(3)]
    one = clients[0].acquire(name, slots=2, ttl="10s", timeout="10s")
    two = clients[1].acquire(name, slots=2, ttl="10s", timeout="10s")
    assert {one.name, two.name} == {f"{name}/+slots/0", f"{name}/+slots/1"}
    with pytest.raises(tenure.Busy):
        clients[2].try_acquire(name, slots=2, ttl="10s")
    # Another N while slots are held is refused, not a second semaphore.
    with pytest.raises(tenure.ConfigError):
        clients[2].try_acquire(name, slots=3, ttl="10s")
    freed = one.name
    assert one.release()
    with clients[2].acquire(name, slots=2, ttl="10s", timeout="10s") as three:
        assert three.name == freed
        assert three.token > one.token
    assert two.release()


def test_watch_sees_acquire_then_release(store: StoreUnderTest) -> None:
    name = store.name("watched")
    client = tenure.Client(tenure.open(store.url))
    changes = client.watch(name, poll="100ms")
    first = next(changes)
    assert (first.change, first.token) == ("current", None)
    lease = client.acquire(name, ttl="10s", timeout="10s")
    acquired = next(changes)
    assert (acquired.change, acquired.token) == ("acquired", lease.token)
    assert acquired.state.holders
    assert lease.release()
    released = next(changes)
    assert (released.change, released.token) == ("released", lease.token)
