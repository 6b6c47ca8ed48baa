"""The worker: runs handlers for jobs the dts coordinator leases to it.

It speaks the JSON worker protocol of docs/protocol.md over Redis, as the Go
worker (worker/*.go) does:

- it heartbeats every interval on the heartbeats stream, naming the jobs it
  holds (the first heartbeat registers it);
- it pops deliveries from its list and cancels from its control list
  (control first), runs each (job_id, lease_token) at most once and reports
  exactly one result per token on the results stream;
- a newer lease of a job it still runs supersedes the old attempt (which is
  cancelled and handed back), a cancel that overtakes its delivery is
  remembered, and a job's time limit counts from its handler's start;
- on SIGTERM it drains: says so, takes no more jobs, lets running handlers
  finish for the grace period, then cancels them and hands them back, hands
  back what it never started, and says it stopped.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import json
import logging
import os
import queue as _queue
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Union, cast
from urllib.parse import unquote, urlparse

import redis
import redis.sentinel

from . import _wire
from .job import Job, Permanent

__all__ = ["Worker", "Handler"]

SyncHandler = Callable[[Job], Any]
AsyncHandler = Callable[[Job], Awaitable[Any]]
Handler = Union[SyncHandler, AsyncHandler]
H = TypeVar("H", bound=Handler)

VERSION = "0.1.0"

# Defaults, as the Go worker's (worker/config.go).
DEFAULT_CONCURRENCY = 8
DEFAULT_HEARTBEAT_INTERVAL = 1.0
DEFAULT_SHUTDOWN_GRACE = 30.0

# Time limits of Redis calls, and of the drain beyond the grace period.
_REDIS_TIMEOUT = 5.0  # one command
_CANCEL_WAIT = 5.0  # for handlers to return once the grace period has ended
_FLUSH_MIN = 1.0  # the least time results get after the last attempt ended
# Seconds one BLMPOP waits. A blocked read cannot be interrupted (the worker's
# Redis user may not run CLIENT UNBLOCK), so this bounds how long SIGTERM
# waits before the drain starts; an idle worker polls four times a second.
_RECEIVE_BLOCK = 0.25

# Bounds the lease tokens remembered beyond those held: tokens delivered
# lately and tokens cancelled before their delivery.
_REMEMBERED = 10_000

# The least time between two progress reports of one attempt.
_PROGRESS_INTERVAL = 1.0

# Causes of an attempt's cancellation (Job.cancel_reason).
_SHUTDOWN = "shutdown"
_CANCELED = "canceled"
_TIMEOUT = "timeout"
_SUPERSEDED = "superseded"
_SUPERSEDED_TEXT = "a newer lease of this job arrived"


class _TokenSet:
    """The last n lease tokens added."""

    def __init__(self, n: int) -> None:
        self._has: set[int] = set()
        self._ring: deque[int] = deque()
        self._n = n

    def __contains__(self, token: int) -> bool:
        return token in self._has

    def add(self, token: int) -> None:
        if len(self._ring) >= self._n:
            self._has.discard(self._ring.popleft())
        self._ring.append(token)
        self._has.add(token)


class _Timers:
    """One thread that runs callbacks at their time (time limits, progress)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, list[Any]]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def after(self, delay: float, fn: Callable[[], None]) -> list[Any]:
        entry: list[Any] = [fn]
        with self._cv:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), entry))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="dtsched-timers", daemon=True)
                self._thread.start()
            self._cv.notify()
        return entry

    @staticmethod
    def cancel(entry: list[Any] | None) -> None:
        if entry is not None:
            entry[0] = None

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cv.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, entry = heapq.heappop(self._heap)
            fn = entry[0]
            if fn is not None:
                try:
                    fn()
                except Exception:  # a timer must not end the thread
                    logging.getLogger("dtsched.worker").exception("timer callback failed")


class _Pool:
    """Daemon threads for sync handlers, started as needed, at most size.

    Daemon threads, so that a handler that ignores cancellation does not keep
    the process from exiting after the drain.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._q: _queue.SimpleQueue[Callable[[], None]] = _queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if self._idle == 0 and self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._loop, name=f"dtsched-handler-{self._threads}", daemon=True).start()
            else:
                self._idle -= 1
        self._q.put(fn)

    def _loop(self) -> None:
        while True:
            fn = self._q.get()
            fn()
            with self._lock:
                self._idle += 1


class _Attempt:
    __slots__ = ("delivery", "job_id", "token", "attempt_no", "handler", "job", "cause", "started",
                 "started_at", "started_mono", "task", "loop", "progress", "last_sent", "prog_timer", "time_limit",
                 "logs_only", "last_pct", "last_msg")

    def __init__(self, d: dict[str, Any], handler: Handler | None) -> None:
        self.delivery = d
        self.job_id: int = d["job_id"]
        self.token: int = d["lease_token"]
        self.attempt_no: int = d.get("attempt") or 0
        self.handler = handler
        self.job: Job | None = None
        self.cause: str | None = None
        self.started = False
        self.started_at = 0.0  # wall clock, once started
        self.task: asyncio.Task[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.progress: dict[str, Any] | None = None  # the latest report not yet queued
        self.last_sent = 0.0  # monotonic time the last report was queued
        self.prog_timer: list[Any] | None = None
        self.time_limit: list[Any] | None = None
        self.started_mono = 0.0  # monotonic, once started
        # progress is not the handler's report but one carrying its log's
        # lines, repeating the latest report sent (last_pct, last_msg).
        self.logs_only = False
        self.last_pct = 0
        self.last_msg = ""


class Worker:
    """A dts worker.

    ::

        worker = Worker(id="py-1", redis_url="redis://127.0.0.1:6379/0", concurrency=8)

        @worker.handler("send_email")
        def send_email(job):
            ...
            return {"sent": True}

        worker.run()  # until SIGTERM or SIGINT

    Arguments (the Go worker's configuration, worker/config.go):
      id: unique in the fleet, at most 200 characters. Default hostname-pid.
      redis_url: redis:// or rediss://; with Sentinel only its user,
        password, database and scheme count. Default redis://127.0.0.1:6379/0.
      concurrency: jobs run at once. Default 8.
      prefetch: jobs held beyond concurrency, each waiting for a slot. Default 0.
      redis_prefix: prefix of every Redis key; must match the coordinator's. Default "".
      heartbeat_interval: seconds; must match the coordinator's. Default 1.
      shutdown_grace: seconds running jobs get to finish on shutdown. Default 30.
      credential: sent with every heartbeat for the coordinator to check. Default none.
      queues: queues served with weights, [("critical", 6), ("default", 3)]. Default: all.
      sentinel_addrs, sentinel_master, sentinel_password: Redis Sentinel
        (host:port strings, the master's name, the sentinels' own password).
      logger: where the worker logs. Default logging.getLogger("dtsched.worker").
    """

    def __init__(
        self,
        id: str | None = None,
        redis_url: str = "redis://127.0.0.1:6379/0",
        concurrency: int = DEFAULT_CONCURRENCY,
        *,
        prefetch: int = 0,
        redis_prefix: str = "",
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE,
        credential: str | None = None,
        queues: list[tuple[str, int]] | None = None,
        sentinel_addrs: list[str] | None = None,
        sentinel_master: str | None = None,
        sentinel_password: str | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.id = id or f"{socket.gethostname()}-{os.getpid()}"
        if len(self.id) > 200:
            raise ValueError("id is longer than 200 characters")
        if not 1 <= concurrency <= 100_000:
            raise ValueError(f"concurrency ({concurrency}) is not within 1..100000")
        if not 0 <= prefetch <= 100_000:
            raise ValueError(f"prefetch ({prefetch}) is not within 0..100000")
        if heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        if shutdown_grace < 0:
            raise ValueError("shutdown_grace must not be negative")
        if sentinel_addrs and not sentinel_master:
            raise ValueError("sentinel_master is required with sentinel_addrs")
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.heartbeat_interval = heartbeat_interval
        self.shutdown_grace = shutdown_grace
        self.credential = credential
        self.queues = list(queues) if queues is not None else None
        self.log = logger or logging.getLogger("dtsched.worker")
        self.keys = _wire.Keys(redis_prefix, self.id)
        self._redis_url = redis_url
        self._sentinel = (list(sentinel_addrs or []), sentinel_master, sentinel_password)
        self._rdb: redis.Redis | None = None
        self._handlers: dict[str, Handler] = {}
        self._is_async: dict[str, bool] = {}

        self._mu = threading.Lock()
        self._send_cv = threading.Condition(self._mu)  # toSend grew, or the sender must finish
        self._idle_cv = threading.Condition(self._mu)  # an attempt ended
        # Attempts are keyed by lease token, not job id: a job can be leased
        # again while its old attempt still runs here (the old lease ran out).
        self._running: dict[int, _Attempt] = {}
        self._unsent: dict[int, float] = {}  # token -> its handler's start (0: never ran), results not yet on the stream
        self._to_send: list[dict[str, Any]] = []
        self._newest: dict[int, int] = {}  # job id -> its newest lease here, while running or unsent
        self._seen = _TokenSet(_REMEMBERED)
        self._canceled: dict[int, int] = {}  # token -> job id, cancelled before its delivery arrived
        self._waiting: deque[_Attempt] = deque()  # attempts waiting for a slot, in delivery order
        self._free = concurrency
        self._active = 0  # attempts accepted and not yet ended (running or waiting)
        self._last_end = 0.0

        self._stop = threading.Event()
        self._draining = False
        self._send_finish = False
        self._send_deadline: float | None = None
        self._hb_stop = threading.Event()
        self._timers = _Timers()
        self._pool = _Pool(concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bad = 0

    # ---- configuration ----

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **defaults: Any) -> Worker:
        """A worker configured by the Go worker's environment variables.

        WORKER_ID, REDIS_URL, REDIS_PREFIX, WORKER_CONCURRENCY, WORKER_PREFETCH,
        HEARTBEAT_INTERVAL and SHUTDOWN_GRACE (Go durations: "1s", "200ms"),
        WORKER_CREDENTIAL, WORKER_QUEUES ("critical:6,default:3"),
        REDIS_SENTINEL_ADDRS, REDIS_SENTINEL_MASTER, REDIS_SENTINEL_PASSWORD.
        defaults (the constructor's keyword arguments) apply where a
        variable is unset or empty.
        """
        e = os.environ if env is None else env

        def get(name: str) -> str | None:
            v = e.get(name, "").strip()
            return v or None

        kw: dict[str, Any] = dict(defaults)
        if (v := get("WORKER_ID")) is not None:
            kw["id"] = v
        if (v := get("REDIS_URL")) is not None:
            kw["redis_url"] = v
        if (v := get("REDIS_PREFIX")) is not None:
            kw["redis_prefix"] = v
        for name, key in (("WORKER_CONCURRENCY", "concurrency"), ("WORKER_PREFETCH", "prefetch")):
            if (v := get(name)) is not None:
                try:
                    kw[key] = int(v)
                except ValueError:
                    raise ValueError(f"{name}: {v!r} is not an integer") from None
        for name, key in (("HEARTBEAT_INTERVAL", "heartbeat_interval"), ("SHUTDOWN_GRACE", "shutdown_grace")):
            if (v := get(name)) is not None:
                try:
                    kw[key] = _wire.parse_duration(v)
                except ValueError as err:
                    raise ValueError(f"{name}: {err}") from None
        if (v := get("WORKER_CREDENTIAL")) is not None:
            kw["credential"] = v
        if (v := get("WORKER_QUEUES")) is not None:
            kw["queues"] = parse_queues(v)
        if (v := get("REDIS_SENTINEL_ADDRS")) is not None:
            kw["sentinel_addrs"] = [a.strip() for a in v.split(",") if a.strip()]
        if (v := get("REDIS_SENTINEL_MASTER")) is not None:
            kw["sentinel_master"] = v
        if (v := get("REDIS_SENTINEL_PASSWORD")) is not None:
            kw["sentinel_password"] = v
        return cls(**kw)

    # ---- handlers ----

    def handler(self, name: str) -> Callable[[H], H]:
        """Registers the decorated function for jobs named name ("*": every other name).

        A plain function runs in a thread of its own (at most concurrency at
        once); an ``async def`` runs on the worker's asyncio event loop. It
        takes the Job and returns the result (anything json.dumps takes, or
        None). An exception fails the attempt, which is retried while
        retries remain; Permanent fails the job at once.
        """

        def register(fn: H) -> H:
            self.handle(name, fn)
            return fn

        return register

    def handle(self, name: str, fn: Handler) -> None:
        """Registers fn for jobs named name; see handler."""
        if not name:
            raise ValueError("handler name is empty")
        self._handlers[name] = fn
        self._is_async[name] = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None))

    def job_types(self) -> list[str]:
        return sorted(self._handlers)

    # ---- running ----

    def stop(self) -> None:
        """Asks run to drain and return. Safe from any thread or a signal handler."""
        self._stop.set()

    def run(self, *, install_signals: bool = True) -> None:
        """Works until SIGTERM or SIGINT (or stop()), then drains and returns.

        Draining: no more jobs are taken; running ones get shutdown_grace to
        finish, then are cancelled and handed back (the attempt not counted);
        ones never started are handed back; results are sent; the last
        heartbeat says stopped.
        """
        if not self._handlers:
            raise RuntimeError("no handlers registered")
        restore: dict[int, Any] = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                restore[sig] = signal.signal(sig, lambda _s, _f: self._stop.set())
        try:
            self._rdb = self._connect()
            if any(self._is_async.values()):
                self._start_loop()
            hb = threading.Thread(target=self._heartbeat_loop, name="dtsched-heartbeat", daemon=True)
            sender = threading.Thread(target=self._send_loop, name="dtsched-sender", daemon=True)
            hb.start()
            sender.start()
            self.log.info("worker started: worker_id=%s concurrency=%d job_types=%s",
                          self.id, self.concurrency, ",".join(self.job_types()))
            self._receive_loop()
            self._drain(hb, sender)
            self._heartbeat(stopped=True)
            self.log.info("worker stopped: worker_id=%s", self.id)
        finally:
            for sig, old in restore.items():
                signal.signal(sig, old)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            if self._rdb is not None:
                self._rdb.close()

    def _connect(self) -> redis.Redis:
        addrs, master, sentinel_password = self._sentinel
        opts: dict[str, Any] = {"socket_timeout": _REDIS_TIMEOUT + _RECEIVE_BLOCK, "socket_connect_timeout": 2.0,
                                "socket_keepalive": True}
        if not addrs:
            return redis.Redis.from_url(self._redis_url, **opts)
        u = urlparse(self._redis_url)
        if u.username:
            opts["username"] = unquote(u.username)
        if u.password:
            opts["password"] = unquote(u.password)
        if u.scheme == "rediss":
            opts["ssl"] = True
        path = u.path.strip("/")
        if path.isdigit():
            opts["db"] = int(path)
        hosts = []
        for a in addrs:
            host, _, port = a.rpartition(":")
            hosts.append((host.strip("[]"), int(port)))
        skw: dict[str, Any] = {"socket_timeout": _REDIS_TIMEOUT, "socket_connect_timeout": 2.0}
        if sentinel_password:
            skw["password"] = sentinel_password
        s = redis.sentinel.Sentinel(hosts, sentinel_kwargs=skw, **opts)
        return s.master_for(master, **opts)

    def _start_loop(self) -> None:
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        threading.Thread(target=run, name="dtsched-asyncio", daemon=True).start()
        ready.wait()
        self._loop = loop

    @property
    def _r(self) -> redis.Redis:
        assert self._rdb is not None
        return self._rdb

    # ---- receiving ----

    def _receive_loop(self) -> None:
        while not self._stop.is_set():
            try:
                reply = self._r.blmpop(_RECEIVE_BLOCK, 2, self.keys.control, self.keys.jobs, direction="RIGHT",
                                       count=self.concurrency + self.prefetch)
            except redis.RedisError as err:
                if not self._stop.is_set():
                    self.log.error("receive failed: %s", err)
                    self._stop.wait(0.2)
                continue
            if reply:
                try:
                    self._handle_inbox(reply, release=False)
                except Exception:  # a bug here must not stop the worker without its drain
                    self.log.exception("handling received messages failed")

    def _release_queued(self, deadline: float) -> None:
        """Hands back deliveries that arrived but were not started."""
        while time.monotonic() < deadline:
            try:
                reply = self._r.lmpop(2, self.keys.control, self.keys.jobs, direction="RIGHT", count=1000)
            except redis.RedisError as err:
                self.log.warning("hand back queued deliveries: %s", err)
                return
            if not reply:
                return
            self._handle_inbox(reply, release=True)

    def _handle_inbox(self, reply: list[Any], release: bool) -> None:
        key, values = reply
        if isinstance(key, bytes):
            key = key.decode()
        is_control = key == self.keys.control
        for raw in values:
            msg = self._decode(raw, is_control)
            if msg is None:
                continue
            if is_control:
                if msg.get("op") == _wire.OP_CANCEL:
                    self._cancel_job(msg["job_id"], msg.get("lease_token") or 0)
            else:
                self._accept(msg, release)

    def _decode(self, raw: bytes, is_control: bool) -> dict[str, Any] | None:
        if raw[:1] and raw[0] in _wire.BINARY_MAGIC:
            self._bad_message("a binary delivery; this worker announces JSON (codec 0)")
            return None
        try:
            msg = json.loads(raw)
        except ValueError as err:
            self._bad_message(f"not JSON: {err}")
            return None
        if not isinstance(msg, dict) or not _positive(msg.get("job_id")):
            self._bad_message("no job_id")
            return None
        if is_control:
            if not isinstance(msg.get("lease_token", 0), int):
                self._bad_message("a control's lease_token is not an integer")
                return None
            return msg
        if not _positive(msg.get("lease_token")) or not isinstance(msg.get("name"), str) or not msg["name"]:
            self._bad_message("a delivery without lease_token or name")
            return None
        return msg

    def _bad_message(self, why: str) -> None:
        self._bad += 1
        self.log.warning("dropped a message that does not decode: %s", why)

    def _cancel_job(self, job_id: int, token: int) -> None:
        """Cancels a running attempt, or remembers the cancel for a delivery
        not received yet (the control list is read before the job list, so a
        cancel can overtake its job). A cancel without a token names the job's
        newest lease here."""
        with self._mu:
            if not token:
                token = self._newest.get(job_id, 0)
            a = self._running.get(token)
            if a is not None and a.job_id == job_id:
                self.log.info("canceling job on request: job_id=%d lease_token=%d", job_id, token)
                self._cancel_locked(a, _CANCELED)
                return
            if not token or token in self._seen:
                return  # nothing of the job here, or that attempt has ended
            if len(self._canceled) >= _REMEMBERED:
                self._canceled.clear()
            self._canceled[token] = job_id

    def _accept(self, d: dict[str, Any], release: bool) -> None:
        """Takes one delivery: starts it (or queues it for a slot), reports it
        handed back if release is set, or failed if it was cancelled before it
        came. The same lease delivered twice runs once. A newer lease of a job
        whose attempt still runs here cancels that attempt and runs."""
        name = d["name"]
        h = self._handlers.get(name)
        if h is None:
            h = self._handlers.get("*")
            is_async = self._is_async.get("*", False)
        else:
            is_async = self._is_async[name]
        job_id, token = d["job_id"], d["lease_token"]
        with self._mu:
            if token in self._running or token in self._unsent or token in self._seen:
                return  # the same lease delivered twice
            self._seen.add(token)
            # Lease tokens are random: the one delivered later is the newer
            # (the list is FIFO, and a job is leased again only after its
            # lease ended).
            old = self._newest.get(job_id)
            if old is not None and old in self._running:
                self.log.info("a new lease of a running job arrived: canceling the old attempt: "
                              "job_id=%d lease_token=%d old_lease_token=%d", job_id, token, old)
                self._cancel_locked(self._running[old], _SUPERSEDED)
            self._newest[job_id] = token
            canceled = self._canceled.pop(token, None) is not None
            if canceled or release:
                now = time.time()
                r = self._result(d, _wire.RELEASED, now, now, reason="shutdown", error="worker shut down")
                if canceled:  # cancelled before it started: it never runs
                    r.update(outcome=_wire.FAILED, reason=_wire.REASON_CANCELED, error="canceled before it started")
                self._report_locked(r, None)
                return
            a = _Attempt(d, h)
            a.loop = self._loop if is_async else None
            self._running[token] = a
            self._active += 1
            if self._free > 0 and not self._waiting:
                self._free -= 1
                self._start_locked(a)
            else:
                self._waiting.append(a)

    # ---- one attempt ----

    def _cancel_locked(self, a: _Attempt, cause: str) -> None:
        if a.cause is not None:
            return
        a.cause = cause
        if not a.started:
            # It waits for a slot: it never runs. Handed back, or failed if cancelled.
            self._waiting.remove(a)
            self._end_locked(a, self._not_started(a))
            return
        assert a.job is not None
        a.job._cancel(cause)
        if a.task is not None and a.loop is not None:
            a.loop.call_soon_threadsafe(a.task.cancel)

    def _not_started(self, a: _Attempt) -> dict[str, Any]:
        now = time.time()
        r = self._result(a.delivery, _wire.RELEASED, now, now, reason="shutdown", error="worker shut down")
        if a.cause == _CANCELED:
            r.update(outcome=_wire.FAILED, reason=_wire.REASON_CANCELED, error="canceled before it started")
        elif a.cause == _SUPERSEDED:
            r.update(reason="superseded", error=_SUPERSEDED_TEXT)
        return r

    def _start_locked(self, a: _Attempt) -> None:
        d = a.delivery
        a.started, a.started_at, a.started_mono = True, time.time(), time.monotonic()
        a.job = Job(id=str(a.job_id), name=d["name"], queue=d.get("queue") or "", payload=d.get("payload"),
                    attempt=a.attempt_no, max_retries=d.get("max_retries") or 0,
                    created_at=_wire.parse_time(d.get("created_at")), worker_id=self.id,
                    timeout_seconds=d.get("timeout_seconds") or 0,
                    progress=lambda pct, msg: self._report_progress(a, pct, msg),
                    on_log=lambda: self._logs_waiting(a))
        # The time limit counts from the handler's start, not the delivery.
        limit = d.get("timeout_seconds") or 0
        if isinstance(limit, int) and limit > 0:
            a.time_limit = self._timers.after(limit, lambda: self._time_out(a))
        if a.handler is None:
            self._pool.submit(lambda: self._finish(a, None, None))
        elif a.loop is not None:
            asyncio.run_coroutine_threadsafe(self._run_async(a), a.loop)
        else:
            self._pool.submit(lambda: self._run_sync(a))

    def _time_out(self, a: _Attempt) -> None:
        with self._mu:
            if self._running.get(a.token) is a:
                self._cancel_locked(a, _TIMEOUT)

    def _run_sync(self, a: _Attempt) -> None:
        assert a.job is not None and a.handler is not None
        try:
            res, err = a.handler(a.job), None
        except BaseException as e:  # noqa: BLE001 - every failure is the attempt's outcome
            res, err = None, e
        self._finish(a, res, err)

    async def _run_async(self, a: _Attempt) -> None:
        assert a.job is not None and a.handler is not None
        with self._mu:
            a.task = asyncio.current_task()
            cancel_now = a.cause is not None
        if cancel_now and a.task is not None:
            a.task.cancel()
        try:
            res, err = await cast(AsyncHandler, a.handler)(a.job), None
        except BaseException as e:  # noqa: BLE001 - CancelledError too: the cause decides the outcome
            res, err = None, e
        self._finish(a, res, err)

    def _finish(self, a: _Attempt, res: Any, err: BaseException | None) -> None:
        d = a.delivery
        r = self._result(d, _wire.COMPLETED, a.started_at, 0.0)
        with self._mu:
            cause = a.cause
        if a.handler is None:
            r.update(outcome=_wire.FAILED, reason=_wire.REASON_PERMANENT,
                     error=f"no handler for job type {json.dumps(d['name'], ensure_ascii=False)}")
        elif cause == _SHUTDOWN:
            r.update(outcome=_wire.RELEASED, reason="shutdown", error="worker shut down")
        elif cause == _SUPERSEDED:
            r.update(outcome=_wire.RELEASED, reason="superseded", error=_SUPERSEDED_TEXT)
        elif cause == _CANCELED:
            r.update(outcome=_wire.FAILED, reason=_wire.REASON_CANCELED, error="canceled")
        elif cause == _TIMEOUT:
            r.update(outcome=_wire.FAILED, reason=_wire.REASON_TIMEOUT,
                     error=f"timed out after {d.get('timeout_seconds') or 0}s")
        elif err is not None:
            reason = _wire.REASON_PERMANENT if isinstance(err, Permanent) else _wire.REASON_ERROR
            r.update(outcome=_wire.FAILED, reason=reason, error=_error_text(err))
        elif res is not None:
            try:
                r["result"] = _json_value(res)
            except (TypeError, ValueError) as e:
                r.update(outcome=_wire.FAILED, reason=_wire.REASON_PERMANENT,
                         error=f"result does not encode to JSON: {e}")
        r["finished_at"] = _wire.rfc3339(time.time())
        if r["outcome"] != _wire.COMPLETED:
            self.log.info("attempt did not succeed: job_id=%d attempt=%d name=%s outcome=%s reason=%s error=%s",
                          a.job_id, a.attempt_no, d["name"], r["outcome"], r.get("reason"), r.get("error"))
        with self._mu:
            self._timers.cancel(a.time_limit)
            self._timers.cancel(a.prog_timer)
            self._end_locked(a, r)
            # The slot goes to the first attempt waiting for one.
            if self._waiting:
                self._start_locked(self._waiting.popleft())
            else:
                self._free += 1

    def _end_locked(self, a: _Attempt, r: dict[str, Any]) -> None:
        """Moves an attempt from running to unsent and queues its result."""
        self._report_locked(r, a)
        self._active -= 1
        self._last_end = time.monotonic()
        self._idle_cv.notify_all()

    def _report_locked(self, r: dict[str, Any], a: _Attempt | None) -> None:
        token = r["lease_token"]
        started = 0.0  # it never ran
        if a is not None:
            if a.progress is not None and a.logs_only:
                a.progress = None  # its lines go with the result
            if a.progress is not None:
                # The latest report goes ahead of the result, unthrottled.
                self._queue_progress_locked(a)
            logs = a.job._log._take(close=True) if a.job is not None and a.job._log is not None else None
            if logs is not None and r["outcome"] != _wire.PROGRESS:
                r["logs"] = logs
            if a.started:
                started = a.started_at
        self._running.pop(token, None)
        self._unsent[token] = started
        self._to_send.append(r)
        self._send_cv.notify()

    def _result(self, d: dict[str, Any], outcome: str, started: float, finished: float, *,
                reason: str = "", error: str = "") -> dict[str, Any]:
        r: dict[str, Any] = {"job_id": d["job_id"], "lease_token": d["lease_token"], "worker_id": self.id,
                             "attempt": d.get("attempt") or 0, "outcome": outcome,
                             "started_at": _wire.rfc3339(started), "finished_at": _wire.rfc3339(finished)}
        if reason:
            r["reason"] = reason
        if error:
            r["error"] = error
        return r

    # ---- progress ----

    def _report_progress(self, a: _Attempt, pct: int, msg: str) -> None:
        """Queues a progress report, at most one per second per attempt, the
        latest winning. A report for an attempt that has ended is dropped."""
        with self._mu:
            if self._running.get(a.token) is not a:
                return
            a.progress = {"job_id": a.job_id, "lease_token": a.token, "worker_id": self.id,
                          "attempt": a.attempt_no, "outcome": _wire.PROGRESS, "progress": pct,
                          "started_at": _wire.rfc3339(time.time()), "finished_at": _wire.ZERO_TIME}
            if msg:
                a.progress["message"] = msg
            a.logs_only = False
            self._schedule_progress_locked(a, a.last_sent)

    def _logs_waiting(self, a: _Attempt) -> None:
        """Schedules a report to carry the lines waiting in the attempt's
        log: its pending progress report, else one that repeats its latest
        progress (the coordinator takes a report with lines and neither a
        percentage nor a message for lines only), not in the attempt's first
        interval: a short attempt's lines go with its result alone."""
        with self._mu:
            if self._running.get(a.token) is not a:
                return
            if a.progress is None:
                a.progress = {"job_id": a.job_id, "lease_token": a.token, "worker_id": self.id,
                              "attempt": a.attempt_no, "outcome": _wire.PROGRESS, "progress": a.last_pct,
                              "started_at": _wire.rfc3339(time.time()), "finished_at": _wire.ZERO_TIME}
                if a.last_msg:
                    a.progress["message"] = a.last_msg
                a.logs_only = True
            self._schedule_progress_locked(a, max(a.last_sent, a.started_mono))

    def _schedule_progress_locked(self, a: _Attempt, since: float) -> None:
        if a.prog_timer is not None:
            return  # queued when the timer fires, the latest then
        wait = since + _PROGRESS_INTERVAL - time.monotonic()
        if since == 0.0 or wait <= 0:
            self._queue_progress_locked(a)
            return
        a.prog_timer = self._timers.after(wait, lambda: self._progress_due(a))

    def _progress_due(self, a: _Attempt) -> None:
        with self._mu:
            a.prog_timer = None
            if self._running.get(a.token) is a and a.progress is not None:
                self._queue_progress_locked(a)

    def _queue_progress_locked(self, a: _Attempt) -> None:
        assert a.progress is not None
        p, a.progress = a.progress, None
        logs = a.job._log._take() if a.job is not None and a.job._log is not None else None
        if logs is not None:
            p["logs"] = logs
        elif a.logs_only:
            return  # the lines went with an earlier report
        if not a.logs_only:
            a.last_pct, a.last_msg = p["progress"], p.get("message", "")
        self._to_send.append(p)
        a.last_sent = time.monotonic()
        self._send_cv.notify()

    # ---- sending results ----

    def _send_loop(self) -> None:
        """Writes queued results to the stream in pipelined batches, retrying
        each until Redis takes it. While a result is unsent its job stays in
        the heartbeats' in-flight list, so its lease is extended meanwhile.
        Once told to finish, it sends what is queued until the deadline."""
        while True:
            with self._mu:
                while not self._to_send and not self._send_finish:
                    self._send_cv.wait()
                batch, self._to_send = self._to_send, []
                if not batch:
                    return  # finishing, and nothing is left
            while batch:
                n = min(len(batch), 512)
                if not self._send(batch[:n]):
                    return
                batch = batch[n:]

    def _send(self, batch: list[dict[str, Any]]) -> bool:
        attempt = 0
        while True:
            attempt += 1
            try:
                pipe = self._r.pipeline(transaction=False)
                for r in batch:
                    pipe.xadd(self.keys.results, {"r": json.dumps(r, ensure_ascii=False, separators=(",", ":"))})
                pipe.execute()
                break
            except redis.RedisError as err:
                self.log.error("send results failed; retrying: count=%d error=%s", len(batch), err)
                wait = min(attempt * 0.1, 2.0)
                with self._mu:
                    deadline = self._send_deadline
                if deadline is not None and time.monotonic() + wait >= deadline:
                    return False
                time.sleep(wait)
        with self._mu:
            for r in batch:
                if r["outcome"] == _wire.PROGRESS:
                    continue  # the attempt's result may still be queued
                token, job_id = r["lease_token"], r["job_id"]
                self._unsent.pop(token, None)
                if self._newest.get(job_id) == token:
                    del self._newest[job_id]
        return True

    # ---- heartbeats ----

    def _heartbeat_loop(self) -> None:
        while True:
            self._heartbeat(stopped=False)
            if self._hb_stop.wait(self.heartbeat_interval):
                return

    def _heartbeat(self, stopped: bool) -> None:
        hb: dict[str, Any] = {"worker_id": self.id, "job_types": self.job_types(), "concurrency": self.concurrency,
                              "in_flight": [], "protocol": _wire.PROTOCOL_VERSION, "host": _HOST,
                              "version": f"dtsched-python/{VERSION}"}
        if self.prefetch:
            hb["prefetch"] = self.prefetch
        if self.queues is not None:
            hb["queues"] = [{"name": n, "weight": w} for n, w in self.queues]
        if self.credential:
            hb["credential"] = self.credential
        # Each job's newest lease only: an older attempt still running here,
        # or its unsent result, has a lease that has ended. Each says whether
        # its handler has started, and when: the job's time limit counts from
        # then.
        now = time.time()
        with self._mu:
            if self._draining:
                hb["draining"] = True
            for job_id, token in self._newest.items():
                f: dict[str, Any] = {"job_id": job_id, "lease_token": token}
                a = self._running.get(token)
                if a is not None:
                    start: float | None = a.started_at if a.started else 0.0
                else:
                    start = self._unsent.get(token)
                if start is None:
                    pass  # neither running nor unsent: say nothing of it
                elif start == 0.0:
                    f["waiting"] = True
                else:
                    f["started"], f["run_ms"] = True, max(0, int((now - start) * 1000))
                hb["in_flight"].append(f)
        if stopped:
            hb["stopped"] = True
        hb["sent_at"] = _wire.rfc3339(now)
        try:
            self._r.xadd(self.keys.heartbeats, {"h": json.dumps(hb, ensure_ascii=False, separators=(",", ":"))},
                         maxlen=_wire.HEARTBEAT_STREAM_LEN, approximate=True)
        except redis.RedisError as err:
            self.log.warning("heartbeat failed: %s", err)

    # ---- shutdown ----

    def _drain(self, hb: threading.Thread, sender: threading.Thread) -> None:
        grace_end = time.monotonic() + self.shutdown_grace
        with self._mu:
            self._draining = True
            # Prefetched jobs go back unrun, before a slot frees for them.
            for a in list(self._waiting):
                self._cancel_locked(a, _SHUTDOWN)
            in_flight = self._active
        self.log.info("worker draining: in_flight=%d grace=%ss", in_flight, self.shutdown_grace)
        self._heartbeat(stopped=False)
        self._release_queued(grace_end)
        finished = self._wait_idle(grace_end)
        if not finished:
            with self._mu:
                n = self._active
                for a in list(self._running.values()):
                    self._cancel_locked(a, _SHUTDOWN)
            self.log.warning("grace period over: canceling running jobs and handing them back: in_flight=%d", n)
            finished = self._wait_idle(time.monotonic() + _CANCEL_WAIT)
            if not finished:
                self.log.error("handlers ignored cancellation; exiting without them")
        # Results are sent until the grace period ends, and for at least
        # _FLUSH_MIN after the last attempt ended. Those Redis has not taken
        # by then are given up: their leases are the leader's to recover.
        with self._mu:
            ended = self._last_end if finished and self._last_end else time.monotonic()
        flush_end = max(grace_end, ended + _FLUSH_MIN)
        self._release_queued(flush_end)
        self._hb_stop.set()
        hb.join()
        with self._mu:
            self._send_finish, self._send_deadline = True, flush_end
            self._send_cv.notify()
        sender.join(max(0.0, flush_end - time.monotonic()))
        with self._mu:
            unsent = len(self._unsent)
        if unsent:
            self.log.warning("results not sent before the drain ended: the leader recovers their jobs by "
                             "their leases: count=%d", unsent)

    def _wait_idle(self, deadline: float) -> bool:
        with self._mu:
            while self._active > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle_cv.wait(left)
            return True


def parse_queues(s: str) -> list[tuple[str, int]]:
    """Parses WORKER_QUEUES: comma-separated name[:weight] entries, weight 0..1000 (default 1)."""
    out: list[tuple[str, int]] = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, w = part.rpartition(":")
        if not sep or not w.isdigit():
            name, weight = part, 1
        else:
            weight = int(w)
        if not name or not 0 <= weight <= 1000:
            raise ValueError(f"WORKER_QUEUES: bad entry {part!r}")
        out.append((name, weight))
    return out


def _positive(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _error_text(err: BaseException) -> str:
    if isinstance(err, asyncio.CancelledError):
        return "handler was cancelled"
    text = str(err)
    if isinstance(err, Permanent) and not text and err.__cause__ is not None:
        text = str(err.__cause__)
    return text or type(err).__name__


def _json_value(v: Any) -> Any:
    """v as it will be sent, checked to encode as strict JSON."""
    json.dumps(v, allow_nan=False)
    return v


_HOST = socket.gethostname()
