"""The client against a tiny http.server that answers as the submitter does."""

from __future__ import annotations

import json
import os
import sys
import threading
import unittest
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from dtsched import APIError, Client, Submitted  # noqa: E402


class FakeSubmitter(BaseHTTPRequestHandler):
    """Submit routes and GET /jobs/{id}, with the API's error shape."""

    jobs: dict[str, dict[str, Any]] = {}
    requests: list[tuple[str, str, dict[str, str], Any]] = []
    gets_until_done = 0
    busy = 0  # answer this many requests 503 backlog_full first

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        b = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b)

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        self._answer(status, {"error": {"code": code, "message": message}}, headers)

    def _record(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        FakeSubmitter.requests.append((self.command, self.path, dict(self.headers), body))
        return body

    def _new(self, j: dict[str, Any]) -> dict[str, Any]:
        job_id = str(len(FakeSubmitter.jobs) + 1)
        FakeSubmitter.jobs[job_id] = {"job_id": job_id, "name": j["name"], "payload": j.get("payload"),
                                      "status": "pending", "result": None}
        return {"job_id": job_id, "status": "pending"}

    def do_POST(self) -> None:
        body = self._record()
        if FakeSubmitter.busy > 0:
            FakeSubmitter.busy -= 1
            self._error(503, "backlog_full", "the backlog is full", {"Retry-After": "0"})
            return
        if self.path == "/submit_job":
            if "colour" in body:
                self._error(400, "invalid_field", "colour: unknown field")
                return
            self._answer(201, self._new(body))
        elif self.path == "/submit_jobs":
            self._answer(201, {"jobs": [self._new(j) for j in body]})
        else:
            self._error(404, "route_not_found", "no such route")

    def do_GET(self) -> None:
        self._record()
        job_id = self.path.removeprefix("/jobs/")
        j = FakeSubmitter.jobs.get(job_id)
        if j is None:
            self._error(404, "not_found", f"job {job_id} not found")
            return
        if FakeSubmitter.gets_until_done > 0:
            FakeSubmitter.gets_until_done -= 1
            if FakeSubmitter.gets_until_done == 0:
                j.update(status="completed", result={"ok": True})
        self._answer(200, j)


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        FakeSubmitter.jobs, FakeSubmitter.requests = {}, []
        FakeSubmitter.gets_until_done, FakeSubmitter.busy = 0, 0
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeSubmitter)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.client = Client(f"http://127.0.0.1:{self.srv.server_address[1]}/", token="dts_key", poll_interval=0.01)

    def tearDown(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()

    def test_submit_sends_fields_and_token(self) -> None:
        got = self.client.submit("send_email", {"to": "a@example.com"}, priority=5, max_retries=2,
                                 run_at=datetime(2030, 1, 2, 15, 4, 5), queue=None)
        self.assertEqual(got, Submitted("1", "pending", True))
        method, path, headers, body = FakeSubmitter.requests[0]
        self.assertEqual((method, path), ("POST", "/submit_job"))
        self.assertEqual(headers["Authorization"], "Bearer dts_key")
        self.assertEqual(body, {"name": "send_email", "payload": {"to": "a@example.com"}, "priority": 5,
                                "max_retries": 2, "run_at": "2030-01-02T15:04:05+00:00"})

    def test_submit_batch(self) -> None:
        got = self.client.submit_batch([{"name": "a"}, {"name": "b", "payload": [1], "priority": 3}])
        self.assertEqual([s.job_id for s in got], ["1", "2"])
        self.assertEqual(FakeSubmitter.requests[0][3], [{"name": "a"}, {"name": "b", "payload": [1], "priority": 3}])
        with self.assertRaises(ValueError):
            self.client.submit_batch([{"payload": 1}])

    def test_errors_carry_code_and_message(self) -> None:
        with self.assertRaises(APIError) as cm:
            self.client.submit("x", colour="red")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.message), (400, "invalid_field", "colour: unknown field"))
        with self.assertRaises(APIError) as cm:
            self.client.get("99")
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "not_found"))

    def test_busy_server_retried_only_when_safe(self) -> None:
        FakeSubmitter.busy = 1
        with self.assertRaises(APIError) as cm:
            self.client.submit("x")
        self.assertEqual(cm.exception.code, "backlog_full")
        FakeSubmitter.busy = 1
        got = self.client.submit("x", idempotency_key="k1")
        self.assertTrue(got.created)
        self.assertEqual(len(FakeSubmitter.requests), 3)

    def test_get_and_wait(self) -> None:
        s = self.client.submit("x", 1)
        self.assertEqual(self.client.get(s.job_id)["status"], "pending")
        FakeSubmitter.gets_until_done = 3
        j = self.client.wait(s.job_id, timeout=10)
        self.assertEqual((j["status"], j["result"]), ("completed", {"ok": True}))
        s2 = self.client.submit("y")
        with self.assertRaises(TimeoutError):
            self.client.wait(s2.job_id, timeout=0.2)


if __name__ == "__main__":
    unittest.main()
