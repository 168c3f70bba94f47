"""Acquire + release per second from one Python process, beside filelock and
redis-py's Lock, and the Python overhead per call against the Rust client.

    python bench.py [--seconds 3] [--rounds 3]

Targets: a local directory and the lease server (`tenure serve`, started here
on a free port) through the `tenure` package; `filelock` on a local file;
redis-py's `Lock` on the Redis at TENURE_TEST_REDIS (skipped if unset or not
installed); and `tenure bench --op cycle --clients 1` (the Rust client) on the
same directory and server, for the per-call overhead of Python. The `tenure`
command is TENURE_BIN, else the workspace's release build, else its debug
build. Measure release builds (`maturin develop --release`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import tenure

ROOT = Path(__file__).resolve().parent.parent


def tenure_bin() -> Path:
    given = os.environ.get("TENURE_BIN")
    if given:
        return Path(given)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    release = target / "release" / "tenure"
    return release if release.exists() else target / "debug" / "tenure"


def measure(cycle: Callable[[], None], seconds: float) -> float:
    """Cycles per second of `cycle`, after a short warm-up."""
    warm = time.perf_counter() + min(0.5, seconds / 4)
    while time.perf_counter() < warm:
        cycle()
    n, start = 0, time.perf_counter()
    end = start + seconds
    while True:
        cycle()
        n += 1
        now = time.perf_counter()
        if now >= end:
            return n / (now - start)


def tenure_cycle(url: str) -> Callable[[], None]:
    client = tenure.Client(tenure.open(url))

    def cycle() -> None:
        client.try_acquire("bench", ttl="30s").release()

    return cycle


def inspect_call(url: str) -> Callable[[], None]:
    """One call into the extension that does almost nothing in the store (a read
    of a lease nobody holds): what crossing from Python into Rust and back costs,
    which an acquire + release pays twice."""
    client = tenure.Client(tenure.open(url))

    def call() -> None:
        client.inspect("bench")

    return call


def filelock_cycle(path: Path) -> Optional[Callable[[], None]]:
    try:
        import filelock
    except ImportError:
        return None
    lock = filelock.FileLock(str(path))

    def cycle() -> None:
        lock.acquire()
        lock.release()

    return cycle


def redis_cycle(url: str) -> Optional[Callable[[], None]]:
    try:
        import redis
    except ImportError:
        return None
    r = redis.Redis.from_url(url)
    r.ping()
    lock = r.lock("tenure-bench-py", timeout=30)

    def cycle() -> None:
        if not lock.acquire(blocking=False):
            raise RuntimeError("redis lock busy")
        lock.release()

    return cycle


def rust_cycles(exe: Path, target: str, seconds: float) -> Optional[float]:
    """The Rust client's cycles per second (`tenure bench`), one client."""
    out = subprocess.run(
        [str(exe), "bench", "--target", target, "--op", "cycle", "--clients", "1",
         "--seconds", f"{seconds}s", "--json", "--no-anchor"],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        print(f"  (tenure bench on {target} failed: {out.stderr.strip()[:200]})")
        return None
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            rate: float = json.loads(line)["cycles_per_sec"]
            return rate
    return None


def start_server(exe: Path, state: Path) -> Tuple["subprocess.Popen[bytes]", str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(exe), "serve", "--listen", f"127.0.0.1:{port}", "--state", str(state),
                             "--max-lease", "30s"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("tenure serve did not start")
            time.sleep(0.05)
    # It grants nothing for its first max-lease (+1 s): waited out here.
    url = f"tenure://127.0.0.1:{port}"
    tenure.Client(tenure.open(url)).acquire("quarantine-probe", ttl="1s", timeout="60s").release()
    return proc, url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per target and round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (A B A B …); the median is reported")
    args = ap.parse_args()

    exe = tenure_bin()
    with tempfile.TemporaryDirectory() as tmp:
        locks = Path(tmp) / "locks"
        locks.mkdir()
        server = None
        if exe.exists():
            server, server_url = start_server(exe, Path(tmp) / "serve.state")
        try:
            # memory:// costs the store nothing: the cycle is the per-call cost of
            # the client (and of Python around it).
            targets: Dict[str, Callable[[], None]] = {
                "tenure memory://": tenure_cycle("memory://"),
                "tenure directory": tenure_cycle(str(locks)),
                "memory:// inspect (1 call)": inspect_call("memory://"),
            }
            if server is not None:
                targets["tenure tenure://"] = tenure_cycle(server_url)
            fl = filelock_cycle(Path(tmp) / "filelock.lock")
            if fl is not None:
                targets["filelock (local file)"] = fl
            redis_url = os.environ.get("TENURE_TEST_REDIS")
            rc = redis_cycle(redis_url) if redis_url else None
            if rc is not None:
                targets["redis-py Lock"] = rc
            rust: Dict[str, List[float]] = {}
            results: Dict[str, List[float]] = {k: [] for k in targets}
            for _ in range(args.rounds):
                for name, cycle in targets.items():
                    results[name].append(measure(cycle, args.seconds))
                if exe.exists():
                    once: Dict[str, Optional[float]] = {
                        "tenure memory://": rust_cycles(exe, "memory://", args.seconds),
                        "tenure directory": rust_cycles(exe, str(Path(tmp) / "locks"), args.seconds)}
                    if server is not None:
                        once["tenure tenure://"] = rust_cycles(exe, server_url, args.seconds)
                    for k, v in once.items():
                        if v is not None:
                            rust.setdefault(k, []).append(v)
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)

    print(f"acquire + release per second, one Python process, median of {args.rounds} x {args.seconds:g}s:")
    for name, rates in results.items():
        print(f"  {name:24} {statistics.median(rates):10.0f} /s   {1e6 / statistics.median(rates):9.1f} µs per cycle")
    if rust:
        print(f"the Rust client (`{exe.name} bench --op cycle --clients 1`) on the same stores:")
        for name, rates in rust.items():
            r = statistics.median(rates)
            py = statistics.median(results[name])
            overhead = 1e6 / py - 1e6 / r
            print(f"  {name:24} {r:10.0f} /s   {1e6 / r:9.1f} µs per cycle; Python adds {overhead:+.1f} µs per cycle")


if __name__ == "__main__":
    main()
