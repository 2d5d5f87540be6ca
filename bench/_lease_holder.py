"""A scheduling worker stopped mid-pass, for bench/recovery.py's scheduler stall: it takes
the scheduler's lease on the platform's Redis as a pass does (`scheduler_lease.held`, renewed
every second), prints `held TOKEN` and waits there until it is SIGKILLed, a dead holder.

    python -m bench._lease_holder REDIS_URL
"""

from __future__ import annotations

import asyncio
import sys

import redis.asyncio as aioredis

from lifecycle_manager.glue import scheduler_lease

HELD = "held "
# The platform's own passes may hold the lease when this starts: wait them out.
_WAIT_FOR_LEASE = scheduler_lease.LeaseTimings(wait_at_most_s=60.0)


async def hold(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    async with scheduler_lease.held(client, _WAIT_FOR_LEASE) as lease:
        print(f"{HELD}{lease.token}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    asyncio.run(hold(sys.argv[1]))


if __name__ == "__main__":
    main()
