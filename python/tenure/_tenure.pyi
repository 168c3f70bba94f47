"""Type stubs of the extension module (see the package's docstring)."""

from datetime import datetime, timedelta
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Union

_Duration = Union[str, float, int, timedelta]

__version__: str

class TenureError(Exception):
    """Base of every error tenure raises."""

class ConfigError(TenureError):
    """A lease name, store URL or option that cannot work."""

class Busy(TenureError):
    """The lease is held by someone else (a try that does not wait)."""

class Timeout(TenureError):
    """Waiting for the lease took longer than the timeout."""

class Lost(TenureError):
    """The lease is gone: stop acting on it at once."""

class Fenced(TenureError):
    """A fenced write was refused: a newer holder has written."""

class Changed(TenureError):
    """The lease changed since it was inspected."""

class Corrupt(TenureError):
    """Stored data is damaged."""

class TokensExhausted(TenureError):
    """The lease's fencing tokens are used up."""

class Unsupported(TenureError):
    """The store lacks a capability."""

class StoreUnavailable(TenureError):
    """I/O or network trouble with the store."""

class Closed(TenureError):
    """A bag bucket is closed."""

class ForkedError(TenureError):
    """An object made before fork() was used in the child."""

class WitnessError(TenureError):
    """Witness bytes that are malformed, or do not verify with the key given."""

class Witness:
    """What a verified witness attests: a grant of a lease by the lease server."""

    @property
    def kind(self) -> str:
        """"grant", "renewal", "tentative" or "upgrade"."""
    @property
    def authorizes_writes(self) -> bool: ...
    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def deadline_ms(self) -> int: ...
    @property
    def deadline(self) -> datetime: ...
    @property
    def server_time_us(self) -> int: ...
    @property
    def holder_nonce(self) -> str: ...
    @property
    def predecessor_token(self) -> Optional[int]: ...
    @property
    def predecessor_watermark_ms(self) -> Optional[int]: ...

def verify_witness(public_key: Union[str, bytes], witness: bytes) -> Witness:
    """Verifies a lease's witness with the server's public key (64 hex digits or 32 bytes)."""

class Store:
    """An opened lease store."""

    @property
    def url(self) -> str: ...

def open(
    url: str, *, create: bool = False, read_only: bool = False, options: Optional[Dict[str, str]] = None
) -> Store:
    """Opens the store ``url`` names (a path without a scheme is a directory)."""

def open_async(
    url: str, *, create: bool = False, read_only: bool = False, options: Optional[Dict[str, str]] = None
) -> Awaitable[Store]:
    """Like ``open``, awaitable."""

def parse_duration(value: _Duration) -> float:
    """A duration in seconds, parsed as every ttl/timeout argument is."""

def schemes() -> List[str]:
    """The store URLs this build opens."""

class HolderInfo:
    """One live holder of a lease (``LeaseState.holders``)."""

    @property
    def holder(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def deadline_ms(self) -> int: ...
    @property
    def expires_in(self) -> float: ...

class LeaseState:
    """A lease record as it is now."""

    @property
    def name(self) -> str: ...
    @property
    def holders(self) -> List[HolderInfo]: ...
    @property
    def last_token(self) -> int: ...
    @property
    def watermark_ms(self) -> Optional[int]: ...
    @property
    def corrupt(self) -> Optional[str]: ...
    @property
    def last_ended(self) -> Optional[str]: ...

class Lease:
    """A held lease; a context manager that releases it."""

    @property
    def name(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def shared(self) -> bool: ...
    @property
    def deadline(self) -> datetime: ...
    @property
    def holder(self) -> str: ...
    @property
    def witness(self) -> Optional[bytes]: ...
    @property
    def predecessor_token(self) -> Optional[int]: ...
    @property
    def lost(self) -> bool: ...
    @property
    def loss_reason(self) -> Optional[str]: ...
    @property
    def health(self) -> str: ...
    @property
    def time_left(self) -> float: ...
    def wait_lost(self, timeout: Optional[_Duration] = None) -> Optional[str]: ...
    def wait_lost_async(self) -> Awaitable[str]: ...
    def on_lost(self, callback: Callable[[str], Any]) -> None: ...
    def release(self) -> bool: ...
    def release_async(self) -> Awaitable[bool]: ...
    def __enter__(self) -> "Lease": ...
    def __exit__(self, *exc: object) -> bool: ...

class LeaseSet:
    """Several leases held together; a context manager that releases them."""

    @property
    def tokens(self) -> Dict[str, int]: ...
    @property
    def names(self) -> List[str]: ...
    @property
    def lost(self) -> bool: ...
    @property
    def loss_reason(self) -> Optional[str]: ...
    @property
    def health(self) -> str: ...
    @property
    def time_left(self) -> float: ...
    def wait_lost(self, timeout: Optional[_Duration] = None) -> Optional[str]: ...
    def on_lost(self, callback: Callable[[str], Any]) -> None: ...
    def release(self) -> bool: ...
    def release_async(self) -> Awaitable[bool]: ...
    def __enter__(self) -> "LeaseSet": ...
    def __exit__(self, *exc: object) -> bool: ...

class Client:
    """A holder's handle on a store: one holder identity, many leases."""

    def __init__(self, store: Store, *, label: Optional[str] = None) -> None: ...
    @property
    def store(self) -> Store: ...
    @property
    def holder(self) -> str: ...
    def try_acquire(
        self,
        name: str,
        *,
        ttl: Optional[_Duration] = None,
        shared: bool = False,
        renew_every: Optional[_Duration] = None,
        meta: Optional[str] = None,
        slots: Optional[int] = None,
    ) -> Lease: ...
    def acquire(
        self,
        name: str,
        *,
        ttl: Optional[_Duration] = None,
        timeout: Optional[_Duration] = None,
        shared: bool = False,
        renew_every: Optional[_Duration] = None,
        meta: Optional[str] = None,
        slots: Optional[int] = None,
    ) -> Lease: ...
    def acquire_async(
        self,
        name: str,
        *,
        ttl: Optional[_Duration] = None,
        timeout: Optional[_Duration] = None,
        shared: bool = False,
        renew_every: Optional[_Duration] = None,
        meta: Optional[str] = None,
        slots: Optional[int] = None,
    ) -> Awaitable[Lease]: ...
    def acquire_all(
        self,
        names: Sequence[str],
        *,
        ttl: Optional[_Duration] = None,
        timeout: Optional[_Duration] = None,
        shared: bool = False,
        renew_every: Optional[_Duration] = None,
        meta: Optional[str] = None,
    ) -> LeaseSet: ...
    def acquire_all_async(
        self,
        names: Sequence[str],
        *,
        ttl: Optional[_Duration] = None,
        timeout: Optional[_Duration] = None,
        shared: bool = False,
        renew_every: Optional[_Duration] = None,
        meta: Optional[str] = None,
    ) -> Awaitable[LeaseSet]: ...
    def watch(self, name: str, *, poll: Optional[_Duration] = None) -> Watch:
        """Who holds ``name`` now, then each change (``tenure watch``)."""
    def inspect(self, name: str) -> LeaseState: ...
    def list(self, prefix: str = "") -> List[str]: ...
    def break_(self, name: str, *, token: Optional[int] = None, reason: Optional[str] = None) -> List[int]: ...

class LeaseChange:
    """One change of a watched lease."""

    @property
    def change(self) -> str:
        """"current", "acquired", "taken_over", "released", "broken", "expired", "renewed_late", "ended" or "corrupt"."""
    @property
    def token(self) -> Optional[int]: ...
    @property
    def holder(self) -> Optional[str]: ...
    @property
    def broken_by(self) -> Optional[str]: ...
    @property
    def state(self) -> LeaseState: ...
    @property
    def seen_ms(self) -> int: ...

class Watch:
    """An iterator of a lease's changes; each ``next()`` waits for one."""

    def __iter__(self) -> Watch: ...
    def __next__(self) -> LeaseChange: ...

class BagMessage:
    """One message of a bag."""

    @property
    def ts_ms(self) -> int: ...
    @property
    def writer(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def payload(self) -> bytes: ...

class BagWriter:
    """A writer of a bag."""

    def append(self, payload: bytes) -> bool:
        """Appends ``payload`` stamped now: True if accepted, False if rejected."""

class Bag:
    """A closable bag of timestamped messages on a directory or an object store."""

    def __init__(self, url: str, *, options: Optional[Dict[str, str]] = None) -> None: ...
    def writer(self, id: Optional[str] = None) -> BagWriter: ...
    def read(self, from_ms: Optional[int] = None, to_ms: Optional[int] = None) -> List[BagMessage]: ...
    def close(self, bucket_ms: int) -> bool: ...
