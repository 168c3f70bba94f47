"""Several leases at once, inspecting and breaking: `python multi_lease.py STORE_URL`."""

from __future__ import annotations

import sys
from typing import List

import tenure


def main(url: str) -> None:
    client = tenure.Client(tenure.open(url), label="multi_lease example")
    names: List[str] = ["accounts/alice", "accounts/bob"]
    with client.acquire_all(names, ttl="30s", timeout="1m") as leases:
        for name, token in leases.tokens.items():
            print(f"{name}: token {token}")
        state: tenure.LeaseState = client.inspect("accounts/alice")
        for h in state.holders:
            print(f"{state.name} held by {h.holder} ({h.mode}, token {h.token}, expires in {h.expires_in:.1f}s)")
    try:
        lease = client.try_acquire("accounts/alice", ttl="30s")
    except tenure.Busy as e:
        print(f"busy: {e}")
        return
    # An operator ends a stuck holder: the next holder's token is above it.
    broken = tenure.Client(client.store).break_("accounts/alice", reason="example")
    print(f"broke tokens {broken}; lost: {lease.wait_lost(timeout='5s')}")
    lease.release()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "memory://")
