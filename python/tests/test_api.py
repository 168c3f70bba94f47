"""The Python surface: durations, errors, context managers, fork, help()."""

from __future__ import annotations

import asyncio
import os
import pydoc
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import tenure


def test_durations_parse_as_the_command_takes_them() -> None:
    assert tenure.parse_duration("30s") == 30
    assert tenure.parse_duration("1m30s") == 90
    assert tenure.parse_duration("250ms") == 0.25
    assert tenure.parse_duration("5") == 5
    assert tenure.parse_duration(0.5) == 0.5
    assert tenure.parse_duration(timedelta(minutes=2)) == 120
    with pytest.raises(tenure.ConfigError):
        tenure.parse_duration("soon")
    with pytest.raises(tenure.ConfigError):
        tenure.parse_duration(-1)
    with pytest.raises(TypeError):
        tenure.parse_duration([1])  # type: ignore[arg-type]


def test_errors_form_a_hierarchy_with_the_commands_messages(tmp_path: Path) -> None:
    for exc in (tenure.Busy, tenure.Timeout, tenure.Lost, tenure.ConfigError, tenure.StoreUnavailable,
                tenure.Corrupt, tenure.ForkedError):
        assert issubclass(exc, tenure.TenureError)
    with pytest.raises(tenure.ConfigError, match=r"invalid lease name \"a//b\""):
        with tenure.lock(str(tmp_path), "a//b"):
            pass
    with pytest.raises(tenure.ConfigError, match="unknown store scheme"):
        tenure.open("ftp://host/locks")
    with pytest.raises(tenure.ConfigError, match='unknown option "bogus"'):
        tenure.open(str(tmp_path), options={"bogus": "1"})
    with tenure.lock(str(tmp_path), "job") as lease:
        with pytest.raises(tenure.Busy, match=r"lease \"job\" is held by .*token"):
            tenure.Client(tenure.open(str(tmp_path))).try_acquire("job")
        with pytest.raises(tenure.Timeout, match=r"timed out after 2[0-9][0-9]ms waiting for lease \"job\""):
            tenure.Client(tenure.open(str(tmp_path))).acquire("job", timeout="200ms")
        assert lease.token == 1


def test_a_lease_shows_its_grant_and_releases_once(tmp_path: Path) -> None:
    before = datetime.now(timezone.utc)
    with tenure.lock(str(tmp_path), "deploy/prod", ttl="30s") as lease:
        assert lease.name == "deploy/prod" and lease.token == 1 and not lease.shared
        assert before + timedelta(seconds=25) < lease.deadline < before + timedelta(seconds=35)
        assert f"pid {os.getpid()}" in lease.holder
        assert lease.witness is None and lease.predecessor_token is None
        assert "deploy/prod" in repr(lease)
    assert lease.lost and lease.loss_reason == "it was released"
    assert lease.release() is False
    with tenure.lock(str(tmp_path), "deploy/prod") as lease2:
        assert lease2.token == 2 and lease2.predecessor_token == 1


def test_the_lease_server_store_can_be_used_without_a_with_block(tmp_path: Path) -> None:
    client = tenure.Client(tenure.open("memory://"), label="ci job 7")
    lease = client.acquire("x", timeout=0)
    assert "ci job 7" in client.holder
    assert client.list() == ["x"]
    assert lease.release()


def test_async_lock(tmp_path: Path) -> None:
    async def main() -> int:
        async with tenure.alock(str(tmp_path), "job", ttl="5s") as lease:
            assert not lease.lost
            return lease.token

    assert asyncio.run(main()) == 1


def test_wait_lost_async_hears_a_release(tmp_path: Path) -> None:
    async def main() -> str:
        client = tenure.Client(await tenure.open_async(str(tmp_path)))
        lease = await client.acquire_async("job")
        waiting = asyncio.ensure_future(lease.wait_lost_async())
        await asyncio.sleep(0.05)
        await lease.release_async()
        return await asyncio.wait_for(waiting, 5)

    assert asyncio.run(main()) == "it was released"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_lease_used_in_a_forked_child_raises(tmp_path: Path) -> None:
    client = tenure.Client(tenure.open(str(tmp_path)))
    with client.acquire("job") as lease:
        pid = os.fork()
        if pid == 0:  # the child: every use says what happened
            code = 0
            for use in (lambda: lease.release(), lambda: client.acquire("other"), lambda: lease.wait_lost(0)):
                try:
                    use()
                    code = 1
                except tenure.ForkedError as e:
                    if "not inherited across fork()" not in str(e):
                        code = 2
            # A fresh client in the child works (the child's own runtime).
            try:
                with tenure.lock(str(tmp_path), "child-only", timeout=5) as mine:
                    code = code or (0 if mine.token == 1 else 3)
            except BaseException:
                code = 4
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # The parent still holds its lease.
        assert not lease.lost


def test_a_thread_holding_the_gil_does_not_starve_renewals(tmp_path: Path) -> None:
    """Renewals run on tenure's own threads: a CPU-bound Python loop that
    never waits does not make the lease expire. The loop outlasts the TTL by
    half: a starved keep-alive would lose the lease within it. (A TTL of a
    few hundred ms lost it on a loaded machine, fsyncs slower than a
    renewal's share of the TTL, GIL or not.)"""
    with tenure.lock(str(tmp_path), "busy-loop", ttl="2s") as lease:
        end = time.monotonic() + 3
        n = 0
        while time.monotonic() < end:
            n += 1
        assert not lease.lost, lease.loss_reason
        assert lease.release()


def test_threads_share_a_client(tmp_path: Path) -> None:
    """Threads of one process, one client: each increment under the lease."""
    client = tenure.Client(tenure.open(str(tmp_path / "locks"), create=True))
    counter = tmp_path / "counter"
    counter.write_text("0")

    def work() -> None:
        for _ in range(20):
            with client.acquire("counter", timeout="60s"):
                value = int(counter.read_text())
                time.sleep(0.001)
                counter.write_text(str(value + 1))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(counter.read_text()) == 80


def test_a_bag_takes_appends_closes_and_reads(tmp_path: Path) -> None:
    bag = tenure.Bag(str(tmp_path))
    writer = bag.writer("w1")
    assert writer.append(b"one") and writer.append(b"two")
    messages = bag.read()
    assert [(m.writer, m.seq, m.payload) for m in messages] == [("w1", 0, b"one"), ("w1", 1, b"two")]
    bucket = messages[0].ts_ms - messages[0].ts_ms % 1000
    time.sleep(3.2)  # past the default grace of 2 s after the (1 s) bucket
    bag.close(bucket)
    assert not bag.close(bucket)  # idempotent: the manifest is already there
    assert [m.payload for m in bag.read()] == [b"one", b"two"]


def test_help_works() -> None:
    for obj in (tenure, tenure.lock, tenure.Client, tenure.Client.acquire, tenure.Lease):
        text = pydoc.render_doc(obj)
        assert len(text) > 100
    assert "fencing token" in (tenure.__doc__ or "")
    assert "Timeout" in (tenure.Client.acquire.__doc__ or "")
