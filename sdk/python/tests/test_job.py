"""The Job a handler sees: cancellation waits and progress checks, without Redis."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from dtsched import Cancelled, Job, parse_duration  # noqa: E402


def new_job(reports: list[tuple[int, str]] | None = None) -> Job:
    return Job(id="1", name="n", queue="default", payload=None, attempt=1, max_retries=0, created_at=None,
               worker_id="w", progress=None if reports is None else lambda p, m: reports.append((p, m)))


class JobTest(unittest.TestCase):
    def test_sync_sleep_ends_on_cancel(self) -> None:
        j = new_job()
        j.sleep(0.01)
        threading.Timer(0.05, j._cancel, args=("timeout",)).start()
        t0 = time.monotonic()
        with self.assertRaises(Cancelled):
            j.sleep(10)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual((j.cancelled, j.cancel_reason), (True, "timeout"))
        with self.assertRaises(Cancelled):
            j.check()

    def test_async_waits_leave_nothing_behind(self) -> None:
        j = new_job()

        async def main() -> None:
            for _ in range(50):
                await j.asleep(0.001)
            self.assertEqual(j._waiters, [])
            self.assertEqual(len(asyncio.all_tasks()), 1)
            threading.Timer(0.05, j._cancel, args=("canceled",)).start()
            with self.assertRaises(Cancelled):
                await j.asleep(10)
            await asyncio.wait_for(j.until_cancelled(), 1)

        asyncio.run(main())

    def test_progress_checked_and_cleaned(self) -> None:
        reports: list[tuple[int, str]] = []
        j = new_job(reports)
        for bad in (-1, 101, 50.5, True):
            with self.assertRaises(ValueError):
                j.progress(bad)  # type: ignore[arg-type]
        j.progress(7, "a\x00b\nc\u0085d" + "é" * 300)
        self.assertEqual(reports, [(7, "abcd" + "é" * 196)])
        j._cancel("canceled")
        j.progress(8)
        self.assertEqual(len(reports), 1)  # none after the attempt ended

    def test_parse_duration(self) -> None:
        for text, want in (("1s", 1.0), ("200ms", 0.2), ("1m30s", 90.0), ("1.5h", 5400.0), ("0", 0.0)):
            self.assertAlmostEqual(parse_duration(text), want)
        for bad in ("", "1", "s", "1x", "1s2"):
            with self.assertRaises(ValueError):
                parse_duration(bad)


if __name__ == "__main__":
    unittest.main()
