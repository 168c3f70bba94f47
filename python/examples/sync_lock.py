"""A fenced write under a lease: `python sync_lock.py STORE_URL`."""

from __future__ import annotations

import sys
from pathlib import Path

import tenure


def write(path: Path, text: str, fenced_by: int) -> None:
    """Writes `text`, refusing if a newer holder (a higher token) already wrote."""
    fence = path.with_suffix(".token")
    if fence.exists() and int(fence.read_text()) > fenced_by:
        raise tenure.Lost(f"fenced: token {fenced_by} is below {fence.read_text()}")
    path.write_text(text)
    fence.write_text(str(fenced_by))


def main(url: str) -> int:
    try:
        with tenure.lock(url, "deploy/prod", ttl="30s", timeout="10m") as lease:
            print(f"holding deploy/prod with token {lease.token} until {lease.deadline:%H:%M:%S} as {lease.holder}")
            lease.on_lost(lambda reason: print(f"lost: {reason}", file=sys.stderr))
            write(Path("deploy.txt"), "deployed\n", fenced_by=lease.token)
            if lease.lost:
                print(f"stop: {lease.loss_reason}", file=sys.stderr)
                return 1
    except tenure.Timeout as e:
        print(f"tenure: {e}", file=sys.stderr)
        return 75
    except tenure.TenureError as e:
        print(f"tenure: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "memory://"))
