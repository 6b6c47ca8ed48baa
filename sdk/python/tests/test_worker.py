"""The worker's rules, checked by playing the coordinator's side of the wire
against a real redis-server: deliveries and cancels pushed onto the worker's
lists, results and heartbeats read from the streams."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest
from collections.abc import Callable
from typing import Any

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
SCHEMAS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "docs", "protocol")
sys.path.insert(0, SRC)
sys.path.insert(0, HERE)

import dtsched.worker  # noqa: E402
from dtsched import Job, Permanent, Worker  # noqa: E402
from redisserver import RedisServer, free_port  # noqa: E402

# A worker notices stop() within one receive wait: keep the tests' short.
dtsched.worker._RECEIVE_BLOCK = 0.1

server: RedisServer


def setUpModule() -> None:
    global server
    server = RedisServer()


def tearDownModule() -> None:
    server.close()


class Coordinator:
    """The coordinator's side of one worker's wire."""

    def __init__(self, url: str, prefix: str, worker_id: str) -> None:
        self.r = redis.Redis.from_url(url)
        self.prefix, self.worker_id = prefix, worker_id
        self.results: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self._cursor = {"results": "0-0", "heartbeats": "0-0"}

    def key(self, name: str) -> str:
        return {"jobs": f"{self.prefix}dts:worker:{self.worker_id}:jobs",
                "control": f"{self.prefix}dts:worker:{self.worker_id}:control",
                "results": f"{self.prefix}dts:results",
                "heartbeats": f"{self.prefix}dts:heartbeats"}[name]

    def deliver(self, job_id: int, token: int, name: str, payload: Any = None, *, attempt: int = 1,
                timeout_seconds: int = 0) -> None:
        d: dict[str, Any] = {"job_id": job_id, "name": name, "queue": "default", "payload": payload,
                             "attempt": attempt, "max_retries": 3, "lease_token": token,
                             "created_at": "2026-11-22T08:40:08.389981234Z"}
        if timeout_seconds:
            d["timeout_seconds"] = timeout_seconds
        self.r.lpush(self.key("jobs"), json.dumps(d))

    def cancel(self, job_id: int, token: int) -> None:
        self.r.lpush(self.key("control"), json.dumps({"op": "cancel", "job_id": job_id, "lease_token": token}))

    def _read(self, stream: str, field: bytes, into: list[dict[str, Any]]) -> None:
        got = self.r.xread({self.key(stream): self._cursor[stream]}, count=1000, block=50)
        for _, entries in got or []:
            for entry_id, fields in entries:
                self._cursor[stream] = entry_id.decode()
                into.append(json.loads(fields[field]))

    def wait(self, what: str, cond: Callable[[], bool], timeout: float = 10.0) -> None:
        """Reads the streams until cond holds; fails after timeout seconds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; results {self.results}")
            self._read("results", b"r", self.results)
            self._read("heartbeats", b"h", self.heartbeats)

    def outcomes(self, token: int) -> list[dict[str, Any]]:
        return [r for r in self.results if r["lease_token"] == token and r["outcome"] != "progress"]

    def outcome(self, token: int, timeout: float = 10.0) -> dict[str, Any]:
        self.wait(f"the result of token {token}", lambda: bool(self.outcomes(token)), timeout)
        return self.outcomes(token)[0]

    def started(self, token: int, timeout: float = 10.0) -> None:
        """Waits for a heartbeat saying the attempt's handler has started."""
        self.wait(f"token {token} started", lambda: any(
            f["lease_token"] == token and f.get("started") for hb in self.heartbeats for f in hb["in_flight"]),
            timeout)


class WorkerCase(unittest.TestCase):
    """Runs a worker in a thread, with the test's own key prefix."""

    concurrency = 4
    prefetch = 0
    grace = 5.0

    def setUp(self) -> None:
        self.prefix = f"{self.id()}:"
        self.worker = Worker(id="py-test", redis_url=server.url, concurrency=self.concurrency,
                             prefetch=self.prefetch, redis_prefix=self.prefix, heartbeat_interval=0.1,
                             shutdown_grace=self.grace, credential="secret")
        self.ran: list[int] = []  # lease attempts' job ids, in the order handlers ran
        self.release = threading.Event()
        w = self.worker

        @w.handler("echo")
        def echo(job: Job) -> Any:
            self.ran.append(int(job.id))
            return job.payload

        @w.handler("fail")
        def fail(job: Job) -> Any:
            raise RuntimeError(f"failed on attempt {job.attempt}")

        @w.handler("permanent")
        def permanent(job: Job) -> Any:
            raise Permanent("permanent failure")

        @w.handler("sleep")
        def sleep(job: Job) -> Any:
            self.ran.append(int(job.id))
            job.sleep(job.payload["ms"] / 1000)
            return {"slept_ms": job.payload["ms"]}

        @w.handler("asleep")
        async def asleep(job: Job) -> Any:
            import asyncio
            await asyncio.sleep(job.payload["ms"] / 1000)  # cancelled with the task
            return {"slept_ms": job.payload["ms"]}

        @w.handler("stubborn")
        def stubborn(job: Job) -> Any:
            self.release.wait(10)
            return {"done": True}

        @w.handler("chatty")
        def chatty(job: Job) -> Any:
            end = time.monotonic() + job.payload["ms"] / 1000
            i = 0
            while time.monotonic() < end:
                i += 1
                job.progress(min(i, 99), f"step {i}\x07")
                time.sleep(0.001)
            job.progress(100, "last")
            return {"steps": i}

        @w.handler("logs")
        def logs(job: Job) -> Any:
            job.log.info("start", to="ada lovelace", n=2, ok=True)
            job.sleep(job.payload["ms"] / 1000)
            for _ in range(70):
                job.log.debug("x" * 1000)
            job.log.error("last")
            return None

        self.thread = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
        self.c = Coordinator(server.url, self.prefix, "py-test")
        self.thread.start()
        self.c.wait("the first heartbeat", lambda: bool(self.c.heartbeats))

    def tearDown(self) -> None:
        self.release.set()
        self.worker.stop()
        self.thread.join(15)
        self.assertFalse(self.thread.is_alive(), "the worker did not stop")
        self.c.r.close()


class WorkerTest(WorkerCase):
    def test_heartbeat_describes_worker(self) -> None:
        hb = self.c.heartbeats[0]
        self.assertEqual(hb["worker_id"], "py-test")
        self.assertEqual(hb["job_types"], sorted(["asleep", "chatty", "echo", "fail", "logs", "permanent", "sleep",
                                                  "stubborn"]))
        self.assertEqual(hb["concurrency"], 4)
        self.assertEqual(hb["in_flight"], [])
        self.assertEqual(hb["credential"], "secret")
        self.assertNotIn("codec", hb)  # JSON
        self.assertEqual(hb["protocol"], 1)
        self.assertTrue(hb["host"] and hb["version"].startswith("dtsched-python/"))
        self.assertTrue(hb["sent_at"].endswith("Z"))

    def test_outcomes(self) -> None:
        self.c.deliver(1, 101, "echo", {"a": ["é", 1]})
        self.c.deliver(2, 102, "fail", None, attempt=2)
        self.c.deliver(3, 103, "permanent")
        self.c.deliver(4, 104, "nobody")
        r = self.c.outcome(101)
        self.assertEqual((r["outcome"], r["result"], r["worker_id"], r["attempt"]),
                         ("completed", {"a": ["é", 1]}, "py-test", 1))
        r = self.c.outcome(102)
        self.assertEqual((r["outcome"], r["reason"], r["error"], r["attempt"]),
                         ("failed", "error", "failed on attempt 2", 2))
        r = self.c.outcome(103)
        self.assertEqual((r["outcome"], r["reason"], r["error"]), ("failed", "permanent", "permanent failure"))
        r = self.c.outcome(104)
        self.assertEqual((r["outcome"], r["reason"]), ("failed", "permanent"))
        self.assertIn("no handler", r["error"])

    @unittest.skipUnless(os.path.isdir(SCHEMAS), "no docs/protocol beside the SDK (a copy outside the repository)")
    def test_messages_match_schemas(self) -> None:
        """Every field sent is in docs/protocol's schema, and every required one is sent."""
        self.c.deliver(15, 115, "chatty", {"ms": 10})
        self.c.deliver(16, 116, "fail")
        self.c.deliver(17, 117, "stubborn")
        self.c.started(117)
        self.c.outcome(115)
        self.c.outcome(116)
        self.release.set()
        self.c.outcome(117)
        for name, msgs in (("result", self.c.results), ("heartbeat", self.c.heartbeats)):
            with open(os.path.join(SCHEMAS, f"{name}.schema.json")) as f:
                schema = json.load(f)
            fields, required = set(schema["properties"]), set(schema["required"])
            for m in msgs:
                self.assertLessEqual(set(m), fields, m)
                self.assertLessEqual(required, set(m), m)
                if name == "heartbeat":
                    held = set(schema["$defs"]["in_flight"]["properties"])
                    for f in m["in_flight"]:
                        self.assertLessEqual(set(f), held, f)
        self.assertIn("progress", {r["outcome"] for r in self.c.results})
        self.assertTrue(any(hb["in_flight"] for hb in self.c.heartbeats))

    def test_runs_once_per_token(self) -> None:
        for _ in range(3):
            self.c.deliver(5, 105, "echo", 1)
        self.c.outcome(105)
        self.c.deliver(6, 106, "echo", 2)  # results are in order: 105's duplicates came before
        self.c.outcome(106)
        self.c.deliver(5, 105, "echo", 1)  # long after its result was sent
        self.c.deliver(7, 107, "echo", 3)
        self.c.outcome(107)
        self.assertEqual(len(self.c.outcomes(105)), 1)
        self.assertEqual(self.ran.count(5), 1)

    def test_newer_token_supersedes(self) -> None:
        self.c.deliver(8, 108, "sleep", {"ms": 10_000})
        self.c.started(108)
        self.c.deliver(8, 208, "echo", "again", attempt=2)
        old, new = self.c.outcome(108), self.c.outcome(208)
        self.assertEqual((old["outcome"], old["reason"]), ("released", "superseded"))
        self.assertEqual((new["outcome"], new["result"]), ("completed", "again"))

    def test_cancel_before_delivery(self) -> None:
        self.c.cancel(9, 109)
        self.c.wait("the cancel read", lambda: self.c.r.llen(self.c.key("control")) == 0)
        self.c.deliver(9, 109, "echo", 1)
        r = self.c.outcome(109)
        self.assertEqual((r["outcome"], r["reason"]), ("failed", "canceled"))
        self.assertNotIn(9, self.ran)

    def test_cancel_running_sync_and_async(self) -> None:
        self.c.deliver(10, 110, "sleep", {"ms": 10_000})
        self.c.deliver(11, 111, "asleep", {"ms": 10_000})
        self.c.started(110)
        self.c.started(111)
        self.c.cancel(10, 110)
        self.c.cancel(11, 0)  # no token: the job's newest lease here
        for token in (110, 111):
            r = self.c.outcome(token, timeout=3)
            self.assertEqual((r["outcome"], r["reason"], r["error"]), ("failed", "canceled", "canceled"))

    def test_time_limit_counts_from_start(self) -> None:
        self.c.deliver(12, 112, "asleep", {"ms": 10_000}, timeout_seconds=1)
        t0 = time.monotonic()
        r = self.c.outcome(112)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        self.assertEqual((r["outcome"], r["reason"], r["error"]), ("failed", "timeout", "timed out after 1s"))

    def test_progress_throttled_latest_wins_before_result(self) -> None:
        self.c.deliver(13, 113, "chatty", {"ms": 2500})
        r = self.c.outcome(113)
        self.assertEqual(r["outcome"], "completed")
        mine = [x for x in self.c.results if x["lease_token"] == 113]
        progress = [x for x in mine if x["outcome"] == "progress"]
        # One at once, then at most one a second over 2.5 s, then the
        # latest ahead of the result.
        self.assertLessEqual(len(progress), 5, progress)
        self.assertGreaterEqual(len(progress), 3, progress)
        self.assertEqual(mine[-1]["outcome"], "completed")
        self.assertEqual((mine[-2]["progress"], mine[-2]["message"]), (100, "last"))
        self.assertEqual(progress[0]["message"], "step 1")  # the control character dropped

    def test_heartbeat_names_held_jobs(self) -> None:
        self.c.deliver(14, 114, "stubborn")
        self.c.started(114)
        hb = self.c.heartbeats[-1]
        f = [f for f in hb["in_flight"] if f["lease_token"] == 114][0]
        self.assertEqual((f["job_id"], f["started"]), (14, True))
        self.assertGreaterEqual(f["run_ms"], 0)
        self.release.set()
        self.c.outcome(114)
        n = len(self.c.heartbeats)
        self.c.wait("a later heartbeat", lambda: len(self.c.heartbeats) > n + 1)
        self.assertEqual(self.c.heartbeats[-1]["in_flight"], [])


class LogsTest(WorkerCase):
    def test_job_log_lines_travel_with_reports_and_result(self) -> None:
        """job.log's lines go in a lines-only report while the attempt runs
        (after its first second), the rest with the result, the newest
        64 KiB kept and the dropped counted; a quiet handler sends none."""
        self.c.deliver(30, 130, "logs", {"ms": 1300})
        r = self.c.outcome(130)
        mine = [x for x in self.c.results if x["lease_token"] == 130]
        report = [x for x in mine if x["outcome"] == "progress"]
        self.assertEqual(len(report), 1, mine)
        self.assertEqual(report[0]["progress"], 0)
        self.assertNotIn("message", report[0])
        self.assertEqual([(ln["level"], ln["message"]) for ln in report[0]["logs"]["lines"]],
                         [("INFO", 'start to="ada lovelace" n=2 ok=true')])
        logs = r["logs"]
        size = sum(len(ln["message"].encode()) + 32 for ln in logs["lines"])
        self.assertLessEqual(size, 64 << 10)
        self.assertGreater(logs["dropped"], 0)
        self.assertEqual(logs["dropped"] + len(logs["lines"]), 71)
        self.assertEqual((logs["lines"][-1]["level"], logs["lines"][-1]["message"]), ("ERROR", "last"))
        self.c.deliver(31, 131, "echo", 1)
        self.assertNotIn("logs", self.c.outcome(131))


class ShutdownTest(WorkerCase):
    concurrency = 1
    prefetch = 1
    grace = 0.5

    def test_drain_hands_back(self) -> None:
        self.c.deliver(20, 120, "sleep", {"ms": 10_000})  # runs; cancelled when the grace ends
        self.c.deliver(21, 121, "echo", 1)  # prefetched: waits for the slot
        self.c.started(120)
        self.c.wait("the prefetched job held",
                    lambda: any(f.get("waiting") for f in self.c.heartbeats[-1]["in_flight"]))
        self.worker.stop()
        self.c.wait("a draining heartbeat", lambda: bool(self.c.heartbeats[-1].get("draining")))
        self.c.deliver(22, 122, "echo", 2)  # arrives while draining: never started
        t0 = time.monotonic()
        self.thread.join(10)
        self.assertFalse(self.thread.is_alive())
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        for token in (120, 121, 122):
            r = self.c.outcome(token)
            self.assertEqual((r["outcome"], r["reason"]), ("released", "shutdown"), r)
        self.assertEqual(self.ran, [20])
        self.c.wait("the stopped heartbeat", lambda: bool(self.c.heartbeats[-1].get("stopped")))
        self.assertEqual(len([hb for hb in self.c.heartbeats if hb.get("stopped")]), 1)

    def test_drain_waits_for_running_jobs(self) -> None:
        self.worker.shutdown_grace = 5.0
        self.c.deliver(23, 123, "sleep", {"ms": 300})
        self.c.started(123)
        self.worker.stop()
        self.thread.join(10)
        r = self.c.outcome(123)
        self.assertEqual((r["outcome"], r["result"]), ("completed", {"slept_ms": 300}))


class ProcessTest(unittest.TestCase):
    """The conformance worker as a process: SIGTERM, and a Redis restart."""

    def setUp(self) -> None:
        self.redis = RedisServer()
        env = dict(os.environ, WORKER_ID="py-proc", REDIS_URL=self.redis.url, HEARTBEAT_INTERVAL="100ms",
                   SHUTDOWN_GRACE="300ms", PYTHONPATH=SRC)
        example = os.path.join(os.path.dirname(HERE), "examples", "conformance_worker.py")
        self.proc = subprocess.Popen([sys.executable, example], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        self.c = Coordinator(self.redis.url, "", "py-proc")

    def tearDown(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        self.c.r.close()
        self.redis.close()

    def test_sigterm_drains_and_exits_zero(self) -> None:
        self.c.wait("the first heartbeat", lambda: bool(self.c.heartbeats))
        self.assertEqual(self.c.heartbeats[0]["concurrency"], 4)
        self.c.deliver(1, 11, "conf.stubborn", {"ms": 200})
        self.c.deliver(2, 12, "conf.sleep", {"ms": 10_000})
        self.c.started(12)
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(15), 0)
        self.c.wait("both results and the stopped heartbeat",
                    lambda: bool(self.c.outcomes(11) and self.c.outcomes(12) and self.c.heartbeats[-1].get("stopped")))
        self.assertEqual(self.c.outcomes(11)[0]["result"], {"slept_ms": 200})
        r = self.c.outcomes(12)[0]
        self.assertEqual((r["outcome"], r["reason"]), ("released", "shutdown"))

    def test_redis_restart(self) -> None:
        self.c.wait("the first heartbeat", lambda: bool(self.c.heartbeats))
        self.redis.stop()
        time.sleep(0.5)  # the worker's calls fail meanwhile
        self.redis.start()
        self.c.r = redis.Redis.from_url(self.redis.url)
        self.c._cursor = {"results": "0-0", "heartbeats": "0-0"}
        self.c.heartbeats = []
        self.c.wait("a heartbeat after the restart", lambda: bool(self.c.heartbeats))
        self.c.deliver(3, 13, "conf.text", {"text": "héllo 世界 🎉"})
        r = self.c.outcome(13)
        self.assertEqual(r["result"], {"text": "héllo 世界 🎉", "runes": 10})
        self.assertIsNone(self.proc.poll())


class ACLTest(unittest.TestCase):
    """The worker needs no Redis command beyond the worker ACL of docs/security.md."""

    def test_worker_acl_is_enough(self) -> None:
        prefix = f"{self.id()}:"
        admin = redis.Redis.from_url(server.url)
        self.addCleanup(admin.close)
        admin.execute_command(
            "ACL", "SETUSER", "dts-worker-py", "on", ">pw", "resetkeys", "resetchannels",
            f"~{prefix}dts:worker:py-acl:jobs", f"~{prefix}dts:worker:py-acl:control", f"~{prefix}dts:heartbeats",
            f"~{prefix}dts:results", "-@all", "+ping", "+hello", "+auth", "+select", "+lmpop", "+blmpop", "+xadd")
        self.addCleanup(admin.execute_command, "ACL", "DELUSER", "dts-worker-py")
        errors: list[str] = []

        class Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.levelno >= logging.WARNING:
                    errors.append(record.getMessage())

        log = logging.getLogger(f"dtsched.test.{self.id()}")
        log.addHandler(Collect())
        log.propagate = False
        w = Worker(id="py-acl", redis_url=f"redis://dts-worker-py:pw@127.0.0.1:{server.port}/0", redis_prefix=prefix,
                   heartbeat_interval=0.1, shutdown_grace=0.2, logger=log)
        w.handle("echo", lambda job: job.payload)
        w.handle("sleep", lambda job: job.sleep(10))
        th = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
        c = Coordinator(server.url, prefix, "py-acl")
        self.addCleanup(c.r.close)
        th.start()
        c.deliver(1, 41, "echo", "allowed")
        c.deliver(2, 42, "sleep")
        c.started(42)
        self.assertEqual(c.outcome(41)["result"], "allowed")
        c.cancel(2, 42)
        self.assertEqual(c.outcome(42)["reason"], "canceled")
        c.deliver(3, 43, "sleep")
        c.started(43)
        w.stop()
        th.join(10)
        self.assertEqual(c.outcome(43)["outcome"], "released")
        c.wait("the stopped heartbeat", lambda: bool(c.heartbeats[-1].get("stopped")))
        self.assertEqual([e for e in errors if "grace period over" not in e], [])


@unittest.skipIf(shutil.which("redis-sentinel") is None, "redis-sentinel is not on PATH (Debian package redis-sentinel)")
class SentinelTest(unittest.TestCase):
    """The worker finds the master through a sentinel (with its own password)."""

    def test_through_sentinel(self) -> None:
        port = free_port()
        conf = os.path.join(server.dir, f"sentinel-{port}.conf")
        with open(conf, "w") as f:
            f.write(f"port {port}\nbind 127.0.0.1\nrequirepass spw\n"
                    f"sentinel monitor m 127.0.0.1 {server.port} 1\n")
        sentinel = subprocess.Popen([shutil.which("redis-sentinel") or "", conf], stdout=subprocess.DEVNULL)
        self.addCleanup(sentinel.wait)
        self.addCleanup(sentinel.kill)
        prefix = f"{self.id()}:"
        # The URL's host is not dialled with Sentinel: only its database counts.
        w = Worker(id="py-sentinel", redis_url="redis://unused.invalid:1/0", redis_prefix=prefix,
                   sentinel_addrs=[f"127.0.0.1:{port}"], sentinel_master="m", sentinel_password="spw",
                   heartbeat_interval=0.1)
        w.handle("echo", lambda job: job.payload)
        th = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
        c = Coordinator(server.url, prefix, "py-sentinel")
        self.addCleanup(c.r.close)
        th.start()
        try:
            c.deliver(1, 31, "echo", "via sentinel")
            self.assertEqual(c.outcome(31)["result"], "via sentinel")
        finally:
            w.stop()
            th.join(10)


if __name__ == "__main__":
    unittest.main()
