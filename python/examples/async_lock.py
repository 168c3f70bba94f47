"""Shared and exclusive leases from asyncio: `python async_lock.py STORE_URL`."""

from __future__ import annotations

import asyncio
import sys

import tenure


async def reader(url: str, n: int) -> int:
    async with tenure.alock(url, "dataset", shared=True, ttl="10s", timeout="1m") as lease:
        await asyncio.sleep(0.1)
        print(f"reader {n}: token {lease.token}")
        return lease.token


async def writer(client: tenure.Client) -> None:
    lease = await client.acquire_async("dataset", ttl="10s", timeout="1m")
    try:
        work = asyncio.ensure_future(asyncio.sleep(0.1))
        lost = asyncio.ensure_future(lease.wait_lost_async())
        done, _ = await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
        if lost in done:
            print(f"writer lost the lease: {lost.result()}")
        lost.cancel()
    finally:
        await lease.release_async()


async def main(url: str) -> None:
    tokens = await asyncio.gather(*(reader(url, n) for n in range(3)))
    print(f"readers held tokens {sorted(tokens)}")
    client = tenure.Client(await tenure.open_async(url))
    try:
        await asyncio.wait_for(writer(client), timeout=30)
    except tenure.Timeout as e:
        print(f"tenure: {e}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "memory://"))
