"""A small client of the submitter's HTTP API (docs/api.md), standard library only."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

__all__ = ["APIError", "Client", "Submitted", "TERMINAL"]

# The statuses a job never leaves.
TERMINAL = frozenset({"completed", "failed", "canceled"})

# Retries of a request the server refused for now (429, 503) or that did not
# reach it, when repeating it is safe.
_RETRIES = 3


class APIError(Exception):
    """An error answer of the API: its HTTP status, stable code and message.

    code is one of the codes of docs/api.md ("invalid_field", "not_found",
    "unauthorized", ...), or "" when the answer was not the API's error shape.
    """

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {code}: {message}" if code else f"{status}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class Submitted:
    """A submitted job: its id, its status, and whether this request created it
    (False when an idempotency key or a unique claim matched an earlier job)."""

    job_id: str
    status: str
    created: bool = True


class Client:
    """Submits and reads jobs.

    ::

        c = Client("http://127.0.0.1:8000", token=os.environ.get("DTS_TOKEN"))
        job = c.submit("send_email", {"to": "a@example.com"}, max_retries=5, timeout_seconds=30)
        print(c.wait(job.job_id, timeout=60)["status"])

    token, when set, is sent as "Authorization: Bearer <token>" (an API key
    or a JWT). timeout bounds each HTTP request, in seconds.
    """

    def __init__(self, base_url: str = "http://127.0.0.1:8000", token: str | None = None, *,
                 timeout: float = 30.0, poll_interval: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.poll_interval = poll_interval

    def submit(self, name: str, payload: Any = None, **opts: Any) -> Submitted:
        """Submits one job (POST /submit_job).

        opts are the API's fields: queue, priority, max_retries, delay_seconds,
        run_at (a datetime or an RFC 3339 string), timeout_seconds,
        idempotency_key, depends_on, unique_for, unique_states, unique_key,
        concurrency_key. A request with an idempotency_key is retried when the
        server is busy or unreachable; one without is sent once.
        """
        body = _job_body(name, payload, opts)
        status, out = self._do("POST", "/submit_job", body, retry="idempotency_key" in opts)
        return Submitted(str(out["job_id"]), out["status"], status == 201)

    def submit_batch(self, jobs: list[dict[str, Any]]) -> list[Submitted]:
        """Submits 1 to 1000 jobs in one statement, all or none (POST /submit_jobs).

        Each item is a dict with "name", optional "payload" and the options of
        submit. The answer lists the jobs in order.
        """
        items = []
        for i, j in enumerate(jobs):
            j = dict(j)
            if "name" not in j:
                raise ValueError(f"jobs[{i}]: no name")
            name, payload = j.pop("name"), j.pop("payload", None)
            items.append(_job_body(name, payload, j))
        keyed = bool(items) and all("idempotency_key" in j for j in items)
        status, out = self._do("POST", "/submit_jobs", items, retry=keyed)
        return [Submitted(str(j["job_id"]), j["status"], status == 201) for j in out["jobs"]]

    def get(self, job_id: str | int) -> dict[str, Any]:
        """The job (GET /jobs/{id}), as the API answers it: status, result, errors..."""
        _, out = self._do("GET", "/jobs/" + quote(str(job_id), safe=""), None, retry=True)
        return out

    def cancel(self, job_id: str | int) -> dict[str, Any]:
        """Cancels the job (POST /jobs/{id}/cancel; the admin scope)."""
        _, out = self._do("POST", "/jobs/" + quote(str(job_id), safe="") + "/cancel", {}, retry=False)
        return out

    def wait(self, job_id: str | int, timeout: float | None = None) -> dict[str, Any]:
        """Polls the job until it is completed, failed or canceled, and returns it.

        Raises TimeoutError when timeout seconds pass first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.05
        while True:
            j = self.get(job_id)
            if j.get("status") in TERMINAL:
                return j
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"wait for job {job_id}: still {j.get('status')} after {timeout}s")
                pause = min(pause, left)
            time.sleep(pause)
            pause = min(2 * pause, self.poll_interval)

    def _do(self, method: str, path: str, body: Any, retry: bool) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
        headers = {"Accept": "application/json", "User-Agent": "dtsched-python"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        attempt = 0
        while True:
            attempt += 1
            req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return resp.status, json.loads(resp.read() or b"null")
            except urllib.error.HTTPError as err:
                e = _api_error(err)
                if not (retry and attempt <= _RETRIES and e.status in (429, 503)):
                    raise e from None
                time.sleep(min(e.retry_after if e.retry_after is not None else 0.1 * 2 ** attempt, 5.0))
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if not (retry and attempt <= _RETRIES):
                    raise
                time.sleep(0.1 * 2 ** attempt)


def _job_body(name: str, payload: Any, opts: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name}
    if payload is not None:
        body["payload"] = payload
    for k, v in opts.items():
        if v is None:
            continue
        if isinstance(v, datetime):
            v = (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).isoformat()  # a naive time is UTC
        body[k] = v
    return body


def _api_error(err: urllib.error.HTTPError) -> APIError:
    raw = err.read()
    code, message = "", ""
    try:
        e = json.loads(raw)["error"]
        code, message = str(e.get("code", "")), str(e.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        message = raw.decode("utf-8", "replace").strip()[:500] or (err.reason or "")
    retry_after = None
    ra = err.headers.get("Retry-After") if err.headers else None
    if ra:
        try:
            retry_after = float(ra)
        except ValueError:
            pass
    return APIError(err.code, code, message, retry_after)
