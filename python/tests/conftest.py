"""Stores the suite runs on: a directory, the lease server (`tenure serve`,
started here), etcd and S3 (moto), reached through the same TENURE_TEST_*
variables as the Rust tests. A store whose server is not configured is
skipped, saying why, unless TENURE_REQUIRE_SERVERS=1 (then it fails)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORES = ["dir", "server", "etcd", "s3"]
# The lease server's longest lease: every TTL in the suite is at most this.
MAX_LEASE = "10s"


def required() -> bool:
    return os.environ.get("TENURE_REQUIRE_SERVERS") == "1"


SERVERS_HINT = 'start the test servers with scripts/servers.sh start, then eval "$(scripts/servers.sh env)"'


def unavailable(reason: str, hint: str = SERVERS_HINT) -> None:
    if required():
        pytest.fail(f"{reason} but TENURE_REQUIRE_SERVERS=1 ({hint})")
    pytest.skip(f"{reason} ({hint})")


def tenure_bin() -> Path:
    """The `tenure` command: TENURE_BIN, else the workspace's debug build."""
    given = os.environ.get("TENURE_BIN")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "debug" / "tenure"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, proc: "subprocess.Popen[bytes]", port: int, public_key: str) -> None:
        self.proc = proc
        self.port = port
        # The witness public key its banner printed (64 hex digits).
        self.public_key = public_key


@pytest.fixture(scope="session")
def lease_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Optional[Server]]:
    exe = tenure_bin()
    if not exe.exists():
        yield None
        return
    work = tmp_path_factory.mktemp("serve")
    state = work / "serve.state"
    banner = work / "banner"
    port = free_port()
    with banner.open("wb") as out:
        proc = subprocess.Popen(
            [str(exe), "serve", "--listen", f"127.0.0.1:{port}", "--state", str(state), "--max-lease", MAX_LEASE],
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"tenure serve did not start on port {port}")
            time.sleep(0.05)
    # A server grants nothing for its first max-lease (+1 s): leases of an
    # earlier run may still be live. Waited out once, here.
    import tenure

    probe = tenure.Client(tenure.open(f"tenure://127.0.0.1:{port}"))
    probe.acquire("quarantine-probe", ttl="1s", timeout="30s").release()
    key = [line.rsplit(" ", 1)[-1] for line in banner.read_text().splitlines() if "witness public key" in line]
    assert len(key) == 1, f"tenure serve printed no witness key: {banner.read_text()!r}"
    yield Server(proc, port, key[0])
    proc.terminate()
    proc.wait(10)


class StoreUnderTest:
    """A store URL for one test, and lease names nobody else uses."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self.url = url
        self.prefix = f"t{uuid.uuid4().hex[:12]}"

    def name(self, what: str) -> str:
        return f"{self.prefix}/{what}"


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreUnderTest:
    kind: str = request.param
    rand = uuid.uuid4().hex[:16]
    if kind == "dir":
        root = tmp_path / "locks"
        root.mkdir()
        return StoreUnderTest(kind, str(root))
    if kind == "server":
        server = request.getfixturevalue("lease_server")
        if server is None:
            unavailable(f"the tenure command is not built at {tenure_bin()}", "cargo build -p tenure-cli, or set TENURE_BIN")
        return StoreUnderTest(kind, f"tenure://127.0.0.1:{server.port}")
    if kind == "etcd":
        endpoints = os.environ.get("TENURE_TEST_ETCD", "")
        if not endpoints:
            unavailable("TENURE_TEST_ETCD is not set")
        hosts = ",".join(e.strip().removeprefix("http://") for e in endpoints.split(","))
        return StoreUnderTest(kind, f"etcd://{hosts}/tenure-test/py-{rand}")
    if kind == "s3":
        endpoint = os.environ.get("TENURE_TEST_S3_MOTO", "")
        if not endpoint:
            unavailable("TENURE_TEST_S3_MOTO is not set")
        query = "&".join(
            f"{k}={quote(v, safe='')}"
            for k, v in [
                ("aws_endpoint", endpoint),
                ("aws_allow_http", "true"),
                ("aws_access_key_id", "test"),
                ("aws_secret_access_key", "test"),
                ("aws_region", "us-east-1"),
            ]
        )
        return StoreUnderTest(kind, f"s3://tenure/tests/py-{rand}?{query}")
    raise AssertionError(kind)
