"""The conformance worker of the Python SDK (docs/protocol.md, "Conformance").

Configured only by the environment: WORKER_ID and REDIS_URL (required),
REDIS_PREFIX, WORKER_CONCURRENCY (4), HEARTBEAT_INTERVAL (1s), SHUTDOWN_GRACE
(5s), WORKER_CREDENTIAL. It handles exactly the conf.* job names. Logs go to
stderr; it exits 0 after a clean SIGTERM drain.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from dtsched import Job, Permanent, Worker


def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("WORKER_ID", "REDIS_URL"):
        if not os.environ.get(name):
            print(f"conformance_worker: {name} is required", file=sys.stderr)
            return 2
    worker = Worker.from_env(concurrency=4, shutdown_grace=5.0, heartbeat_interval=1.0)

    @worker.handler("conf.echo")
    def echo(job: Job) -> Any:
        return job.payload

    @worker.handler("conf.fail")
    def fail(job: Job) -> Any:
        n = _field(job, "succeed_on")
        if n is None or job.attempt < n:
            raise RuntimeError(f"failed on attempt {job.attempt}")
        return {"attempt": job.attempt}

    @worker.handler("conf.permanent")
    def permanent(job: Job) -> Any:
        raise Permanent("permanent failure")

    @worker.handler("conf.sleep")
    async def sleep(job: Job) -> Any:
        ms = _field(job, "ms") or 0
        await job.asleep(ms / 1000)
        return {"slept_ms": ms}

    @worker.handler("conf.stubborn")
    def stubborn(job: Job) -> Any:
        ms = _field(job, "ms") or 0
        time.sleep(ms / 1000)  # ignores cancellation on purpose
        return {"slept_ms": ms}

    @worker.handler("conf.progress")
    async def progress(job: Job) -> Any:
        ms = _field(job, "ms")
        job.progress(50, "halfway")
        await job.asleep((1500 if ms is None else ms) / 1000)
        return {"done": True}

    @worker.handler("conf.log")
    def log(job: Job) -> Any:
        lines = job.payload.get("lines", []) if isinstance(job.payload, dict) else []
        for i, line in enumerate(lines, 1):
            job.log.info(str(line), n=i)
        return {"logged": len(lines)}

    @worker.handler("conf.large")
    def large(job: Job) -> Any:
        return {"data": "x" * (_field(job, "size") or 0)}

    @worker.handler("conf.text")
    def text(job: Job) -> Any:
        s = job.payload.get("text", "") if isinstance(job.payload, dict) else ""
        return {"text": s, "runes": len(s)}

    worker.run()
    return 0


def _field(job: Job, name: str) -> int | None:
    """An integer field of an object payload; None if absent."""
    if isinstance(job.payload, dict):
        v = job.payload.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
    return None


if __name__ == "__main__":
    sys.exit(main())
