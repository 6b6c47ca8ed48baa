"""The original system's Python worker, re-done on the dtsched SDK.

The original (a FastAPI app that ran each job inside an HTTP request) had the
job types cpu_intensive, io_intensive, mixed_workload, network_task and a
catch-all that slept for a variable time, which its scripts reach by the names
default and test_job. These handlers behave as the Go worker's built-in ones
(worker/builtin): a payload containing "invalid_job" fails the attempt with a
plain, retryable error, so such a job uses up its retries and is dead-lettered,
as the original's stress scripts expect; every handler stops once its attempt
is cancelled.

Configured by the Go worker's environment (Worker.from_env: WORKER_ID,
REDIS_URL, WORKER_CONCURRENCY, SHUTDOWN_GRACE, ...) and, as cmd/worker:
CPU_WORK (1s), NETWORK_TASK_URL (http://127.0.0.1:8000/healthz),
FALLBACK_MAX (50s), WORKER_FALLBACK (true), LOG_LEVEL (info).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

from dtsched import Job, Permanent, Worker, parse_duration

# Defaults, as worker/builtin's.
CPU_WORK = 1.0
NETWORK_URL = "http://127.0.0.1:8000/healthz"
NETWORK_REQUESTS = 3
NETWORK_TIMEOUT = 30.0
FALLBACK_MIN, FALLBACK_MAX = 0.1, 50.0


class InvalidJob(Exception):
    """The payload contains "invalid_job": deliberately not permanent."""

    def __init__(self) -> None:
        super().__init__("invalid job content")


def invalid(job: Job) -> bool:
    """Whether the payload, as text (a JSON string's own text), contains "invalid_job"."""
    p = job.payload
    text = p if isinstance(p, str) else json.dumps(p, ensure_ascii=False)
    return "invalid_job" in text


def hash_for(job: Job, seconds: float) -> int:
    """Chains SHA-256 over a 32-byte digest, seeded from the job, for seconds; returns the count."""
    digest = hashlib.sha256(f"{job.id}\0{json.dumps(job.payload)}".encode()).digest()
    start, n = time.monotonic(), 0
    sha = hashlib.sha256
    while True:
        for _ in range(1000):
            digest = sha(digest).digest()
        n += 1000
        job.check()
        if time.monotonic() - start >= seconds:
            return n


def file_work(job: Job) -> tuple[int, int]:
    """Writes a temporary file of 1,000-9,999 lines, reads it back, removes it."""
    want = random.randint(1000, 9999)
    fd, name = tempfile.mkstemp(prefix=f"dts-io-{job.id}-", suffix=".txt")
    try:
        with os.fdopen(fd, "w", buffering=64 << 10) as f:
            for i in range(want):
                if i % 512 == 0:
                    job.check()
                f.write(f"job {job.id} line {i + 1} simulated io work 0123456789abcdefghijklmnopqrstuvwxyz\n")
        lines = size = 0
        with open(name, "rb") as f:
            while chunk := f.read(32 << 10):
                job.check()
                lines += chunk.count(b"\n")
                size += len(chunk)
        if lines != want:
            raise RuntimeError(f"io_intensive: read back {lines} lines, wrote {want}")
        return lines, size
    finally:
        os.remove(name)


def fallback_delay(lo: float, hi: float) -> float:
    """The original's simulate_variable_work: fast, medium or slow with equal chance."""
    bucket = random.randrange(3)
    start, end = [(lo, 1.0), (1.0, 10.0), (10.0, hi)][bucket]
    return max(lo, min(start + random.random() * (end - start), hi))


def main() -> int:
    level = os.environ.get("LOG_LEVEL", "info").upper()
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level, logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    env = os.environ
    cpu_work = parse_duration(env["CPU_WORK"]) if env.get("CPU_WORK") else CPU_WORK
    fallback_max = parse_duration(env["FALLBACK_MAX"]) if env.get("FALLBACK_MAX") else FALLBACK_MAX
    fallback_max = max(fallback_max, FALLBACK_MIN)
    network_url = env.get("NETWORK_TASK_URL") or NETWORK_URL
    fallback = env.get("WORKER_FALLBACK", "true").lower() not in ("0", "false", "no")
    worker = Worker.from_env()

    @worker.handler("cpu_intensive")
    def cpu_intensive(job: Job) -> Any:
        if invalid(job):
            raise InvalidJob()
        return {"hashes": hash_for(job, cpu_work)}

    @worker.handler("io_intensive")
    def io_intensive(job: Job) -> Any:
        if invalid(job):
            raise InvalidJob()
        lines, size = file_work(job)
        return {"lines": lines, "bytes": size}

    @worker.handler("mixed_workload")
    def mixed_workload(job: Job) -> Any:
        if invalid(job):
            raise InvalidJob()
        n = hash_for(job, cpu_work / 2)
        lines, size = file_work(job)
        return {"hashes": n, "lines": lines, "bytes": size}

    def get(job: Job) -> int:
        req = urllib.request.Request(network_url, headers={"User-Agent": "dtsched-original-worker",
                                                           "X-Job-ID": job.id})
        try:
            with urllib.request.urlopen(req, timeout=NETWORK_TIMEOUT) as resp:
                resp.read(64 << 10)
                return int(resp.status)
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"GET {network_url}: status {err.code} {err.reason}") from None

    @worker.handler("network_task")
    async def network_task(job: Job) -> Any:
        if invalid(job):
            raise InvalidJob()
        if not network_url.startswith(("http://", "https://")):
            raise Permanent(f"network_task: bad NETWORK_TASK_URL {network_url!r}")
        got = await asyncio.gather(*(asyncio.to_thread(get, job) for _ in range(NETWORK_REQUESTS)),
                                   return_exceptions=True)
        errors = [g for g in got if isinstance(g, BaseException)]
        if errors:
            raise RuntimeError(f"network_task: {len(errors)} of {NETWORK_REQUESTS} requests failed: {errors[0]}")
        return {"requests": NETWORK_REQUESTS, "statuses": got}

    if fallback:
        def variable_work(job: Job) -> Any:
            if invalid(job):
                raise InvalidJob()
            d = fallback_delay(FALLBACK_MIN, fallback_max)
            job.sleep(d)
            return {"slept_ms": int(d * 1000)}

        for name in ("default", "test_job"):
            worker.handle(name, variable_work)

    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
