"""tenure: leases with fencing tokens over storage you already have.

A lease is a lock that expires unless its holder keeps renewing it, and every
grant carries a *fencing token* that grows strictly per lease name: pass it to
the storage you protect, so that a holder that paused past its deadline cannot
overwrite its successor's work.

Stores are named by URL, exactly as the ``tenure`` command takes them: a
directory path (NFS works), ``s3://bucket/prefix``, ``gs://…``, ``az://…``,
``tenure://host:7777`` (the lease server), ``etcd://host:2379/prefix`` or
``memory://``. Store settings go in the URL's query or in ``options=``.

Sync::

    import tenure
    with tenure.lock("/mnt/nfs/locks", "deploy/prod", ttl="30s", timeout="10m") as lease:
        write(fenced_by=lease.token)
        if lease.lost:
            ...

Async::

    async with tenure.alock("tenure://h:7777", "job", shared=True) as lease:
        ...

Several leases, one identity::

    client = tenure.Client(tenure.open("/mnt/nfs/locks"))
    with client.acquire_all(["a", "b"], timeout="1m") as leases:
        ...

Errors derive from :class:`TenureError`; each carries the message the
``tenure`` command prints. The sync calls release the GIL while they wait,
and Ctrl-C while waiting raises :class:`KeyboardInterrupt` at once, holding
nothing. A lease is not inherited across ``fork()``: using one (or a client
or store) in the child raises :class:`ForkedError`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from datetime import timedelta
from typing import AsyncIterator, Dict, Iterator, Mapping, Optional, Tuple, Union

from ._tenure import (
    Bag,
    BagMessage,
    BagWriter,
    Busy,
    Changed,
    Client,
    Closed,
    ConfigError,
    Corrupt,
    Fenced,
    ForkedError,
    HolderInfo,
    Lease,
    LeaseChange,
    LeaseSet,
    LeaseState,
    Lost,
    Store,
    StoreUnavailable,
    TenureError,
    Timeout,
    TokensExhausted,
    Unsupported,
    Watch,
    Witness,
    WitnessError,
    __version__,
    open,
    open_async,
    parse_duration,
    schemes,
    verify_witness,
)

Duration = Union[str, float, int, timedelta]
"""A duration: ``"30s"``, ``"1m30s"``, ``"250ms"``, seconds, or a timedelta."""

__all__ = [
    "Bag",
    "BagMessage",
    "BagWriter",
    "Busy",
    "Changed",
    "Client",
    "Closed",
    "ConfigError",
    "Corrupt",
    "Duration",
    "Fenced",
    "ForkedError",
    "HolderInfo",
    "Lease",
    "LeaseChange",
    "LeaseSet",
    "LeaseState",
    "Lost",
    "Store",
    "StoreUnavailable",
    "TenureError",
    "Timeout",
    "TokensExhausted",
    "Unsupported",
    "Watch",
    "Witness",
    "WitnessError",
    "__version__",
    "alock",
    "client",
    "lock",
    "open",
    "open_async",
    "parse_duration",
    "schemes",
    "verify_witness",
]

# One client per store URL (and options) per process: one holder identity,
# one connection to a server. Forgotten in a forked child.
_clients: Dict[Tuple[int, str, Tuple[Tuple[str, str], ...]], Client] = {}
_clients_lock = threading.Lock()


def client(url: str, *, create: bool = False, options: Optional[Mapping[str, str]] = None) -> Client:
    """The shared client of ``url`` in this process (opened on first use).

    ``lock`` and ``alock`` use it; make your own ``Client(open(url))`` for a
    separate holder identity or a label. ``create`` makes a directory
    store's root (by default a missing directory is an error: an unmounted
    file system must not grant leases that exclude nobody).
    """
    key = (os.getpid(), url, tuple(sorted((options or {}).items())))
    with _clients_lock:
        found = _clients.get(key)
    if found is not None:
        return found
    made = Client(open(url, create=create, options=dict(options) if options else None))
    with _clients_lock:
        return _clients.setdefault(key, made)


async def _client_async(url: str, create: bool, options: Optional[Mapping[str, str]]) -> Client:
    key = (os.getpid(), url, tuple(sorted((options or {}).items())))
    with _clients_lock:
        found = _clients.get(key)
    if found is not None:
        return found
    made = Client(await open_async(url, create=create, options=dict(options) if options else None))
    with _clients_lock:
        return _clients.setdefault(key, made)


@contextlib.contextmanager
def lock(
    url: str,
    name: str,
    *,
    ttl: Duration = "30s",
    timeout: Optional[Duration] = "10m",
    shared: bool = False,
    slots: Optional[int] = None,
    meta: Optional[str] = None,
    create: bool = False,
    options: Optional[Mapping[str, str]] = None,
) -> Iterator[Lease]:
    """Holds lease ``name`` of the store at ``url`` for the ``with`` block.

    Waits up to ``timeout`` (None: for ever; raises :class:`Timeout`), keeps
    the lease renewed in the background while the block runs, and releases it
    when the block ends, also by an exception. Check ``lease.lost`` (or use
    ``lease.wait_lost()`` / ``lease.on_lost()``) in long work, and pass
    ``lease.token`` to what you write as a fence. With ``slots=N``, holds one
    of N slots of the name (at most N holders at once; ``lease.name`` is the
    slot's own lease).
    """
    lease = client(url, create=create, options=options).acquire(
        name, ttl=ttl, timeout=timeout, shared=shared, slots=slots, meta=meta
    )
    try:
        yield lease
    finally:
        lease.release()


@contextlib.asynccontextmanager
async def alock(
    url: str,
    name: str,
    *,
    ttl: Duration = "30s",
    timeout: Optional[Duration] = "10m",
    shared: bool = False,
    slots: Optional[int] = None,
    meta: Optional[str] = None,
    create: bool = False,
    options: Optional[Mapping[str, str]] = None,
) -> AsyncIterator[Lease]:
    """``lock`` for asyncio: ``async with tenure.alock(url, name) as lease:``.

    Cancelling the task while it waits withdraws the wait and leaves no grant
    behind.
    """
    c = await _client_async(url, create, options)
    lease = await c.acquire_async(name, ttl=ttl, timeout=timeout, shared=shared, slots=slots, meta=meta)
    try:
        yield lease
    finally:
        await lease.release_async()
