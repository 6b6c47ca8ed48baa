"""The job a handler receives, and the exceptions a handler may raise."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import unicodedata
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import _wire


class Permanent(Exception):
    """Fails the job at once, without the retries it has left.

    Raise it for errors retrying cannot fix (a malformed payload)::

        raise Permanent("payload has no 'to' address")
        raise Permanent(err) from err
    """


class Cancelled(Exception):
    """Raised by Job.sleep, Job.asleep and Job.check once the attempt is cancelled.

    A handler may let it propagate: the attempt's outcome follows the cause
    (Job.cancel_reason), not the exception.
    """


class Job:
    """One attempt at one job, as its handler sees it.

    The attempt is cancelled when the job is cancelled, when its time limit
    (timeout_seconds, counted from the handler's start) passes, when a newer
    lease of the job reaches this worker, or when the worker shuts down and
    the grace period has run out. A handler checks ``job.cancelled``, waits
    with ``job.sleep``/``job.wait_cancelled`` (sync) or ``await job.asleep``/
    ``await job.until_cancelled()`` (async); an async handler's task is also
    cancelled (asyncio.CancelledError at its next await).
    """

    def __init__(
        self,
        *,
        id: str,
        name: str,
        queue: str,
        payload: Any,
        attempt: int,
        max_retries: int,
        created_at: datetime | None,
        worker_id: str,
        timeout_seconds: int = 0,
        progress: Callable[[int, str], None] | None = None,
        on_log: Callable[[], None] | None = None,
    ) -> None:
        self.id = id  # the job id as the API shows it (a decimal string)
        self.name = name  # the job type
        self.queue = queue  # the queue it was submitted to
        self.payload = payload  # the payload, decoded from JSON
        self.attempt = attempt  # 1 for the first attempt
        self.max_retries = max_retries  # retries allowed after the first attempt
        self.created_at = created_at  # when the job was submitted
        self.worker_id = worker_id  # the worker running this attempt
        self.timeout_seconds = timeout_seconds  # the attempt's time limit; 0: none
        self._progress = progress
        self._on_log = on_log
        self._log: JobLog | None = None
        self._event = threading.Event()
        self._reason: str | None = None
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, name={self.name!r}, attempt={self.attempt})"

    # ---- cancellation ----

    @property
    def cancelled(self) -> bool:
        """Whether the attempt has been cancelled."""
        return self._event.is_set()

    @property
    def cancel_reason(self) -> str | None:
        """Why: "canceled", "timeout", "shutdown" or "superseded"; None while it runs."""
        return self._reason

    def check(self) -> None:
        """Raises Cancelled if the attempt has been cancelled."""
        if self._event.is_set():
            raise Cancelled(self._reason or "cancelled")

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Blocks until the attempt is cancelled or timeout seconds pass; True if cancelled."""
        return self._event.wait(timeout)

    def sleep(self, seconds: float) -> None:
        """Sleeps, but raises Cancelled as soon as the attempt is cancelled."""
        if self._event.wait(max(0.0, seconds)):
            raise Cancelled(self._reason or "cancelled")

    async def until_cancelled(self) -> None:
        """Returns once the attempt is cancelled."""
        await self._wait(None)

    async def asleep(self, seconds: float) -> None:
        """Sleeps, but raises Cancelled as soon as the attempt is cancelled."""
        if await self._wait(max(0.0, seconds)):
            raise Cancelled(self._reason or "cancelled")

    async def _wait(self, timeout: float | None) -> bool:
        """Waits for the cancel up to timeout seconds (None: for ever); True if it came."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiter = (loop, fut)
        with self._lock:
            if self._event.is_set():
                return True
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    # ---- progress ----

    def progress(self, pct: int, message: str = "") -> None:
        """Reports how far the attempt has come: pct 0..100 and a short message.

        The message loses its control characters and is cut to 200
        characters. It never blocks: reports travel ahead of the attempt's
        result, at most one a second per attempt (the latest within the
        second wins). GET /jobs/{id} shows the latest as progress and
        progress_message. Raises ValueError when pct is out of range.
        """
        if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= _wire.MAX_PROGRESS:
            raise ValueError(f"progress {pct!r}: must be an integer between 0 and {_wire.MAX_PROGRESS}")
        if self._event.is_set():
            return
        if self._progress is not None:
            self._progress(pct, progress_message(message))


    # ---- logs ----

    @property
    def log(self) -> JobLog:
        """The attempt's log: ``job.log.info("sent", to=addr)``.

        What a handler logs with it is kept with the job (GET /jobs/{id}/logs,
        ``dtsctl jobs logs``): each line with its time, level, message and
        keyword attributes as key=value, the newest 64 KiB of the attempt
        (older lines are dropped and counted). Lines travel with the
        attempt's progress reports (at most one a second, none in its first
        second) and its result; lines logged after the handler returned are
        dropped. They also go to the "dtsched" logger at DEBUG.
        """
        with self._lock:
            if self._log is None:
                self._log = JobLog(self._on_log, self.id, self.attempt)
            return self._log


class JobLog:
    """A job attempt's log (Job.log). Its methods take a message and keyword
    attributes and never block."""

    def __init__(self, notify: Callable[[], None] | None = None, job_id: str = "", attempt: int = 0) -> None:
        self._mu = threading.Lock()
        self._lines: list[dict[str, Any]] = []
        self._size = 0
        self._dropped = 0
        self._closed = False
        self._notify = notify
        self._job_id, self._attempt = job_id, attempt

    def debug(self, msg: str, **attrs: Any) -> None:
        self._add("DEBUG", msg, attrs)

    def info(self, msg: str, **attrs: Any) -> None:
        self._add("INFO", msg, attrs)

    def warning(self, msg: str, **attrs: Any) -> None:
        self._add("WARN", msg, attrs)

    warn = warning

    def error(self, msg: str, **attrs: Any) -> None:
        self._add("ERROR", msg, attrs)

    def _add(self, level: str, msg: str, attrs: dict[str, Any]) -> None:
        text = str(msg) + "".join(f" {k}={_attr_value(v)}" for k, v in attrs.items())
        text = _cut_utf8(text, _wire.MAX_LOG_LINE_BYTES)
        line = {"time": _wire.rfc3339(time.time()), "level": level, "message": text}
        size = len(text.encode("utf-8", "replace")) + _wire.LOG_LINE_OVERHEAD
        with self._mu:
            if self._closed:
                return
            was_empty = not self._lines
            self._lines.append(line)
            self._size += size
            drop = 0
            while self._size > _wire.MAX_ATTEMPT_LOG_BYTES and drop < len(self._lines) - 1:
                self._size -= len(self._lines[drop]["message"].encode("utf-8", "replace")) + _wire.LOG_LINE_OVERHEAD
                drop += 1
            if drop:
                self._dropped += drop
                del self._lines[:drop]
        _module_log.debug("job %s attempt %d: %s %s", self._job_id, self._attempt, level, text)
        if was_empty and self._notify is not None:
            self._notify()

    def _take(self, close: bool = False) -> dict[str, Any] | None:
        """The lines held and the count of those dropped before them, emptied;
        None when it holds neither. close: later lines are dropped."""
        with self._mu:
            self._closed = self._closed or close
            if not self._lines and not self._dropped:
                return None
            out: dict[str, Any] = {"lines": self._lines}
            if self._dropped:
                out["dropped"] = self._dropped
            self._lines, self._size, self._dropped = [], 0, 0
            return out


_module_log = logging.getLogger("dtsched")


def _attr_value(v: Any) -> str:
    """v as key=value shows it: true/false for booleans, quoted (JSON) when
    empty or holding a space, a quote, an = or a control character."""
    if isinstance(v, bool):
        s = "true" if v else "false"
    elif v is None:
        s = "null"
    else:
        s = str(v)
    if s == "" or any(c in ' "=' or unicodedata.category(c) == "Cc" for c in s):
        return json.dumps(s, ensure_ascii=False)
    return s


def _cut_utf8(s: str, limit: int) -> str:
    """s cut to at most limit bytes of UTF-8, on a character boundary."""
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore")


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def progress_message(msg: str) -> str:
    """msg without control characters or lone surrogates, at most 200 characters."""
    out: list[str] = []
    for ch in str(msg):
        if len(out) == _wire.MAX_PROGRESS_MESSAGE:
            break
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cs"):
            continue
        out.append(ch)
    return "".join(out)
