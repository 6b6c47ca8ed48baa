"""What crosses Redis between the coordinator and a worker (docs/protocol.md).

Key names, the JSON messages' helpers, and parsing of Go duration strings
("1s", "200ms"), which the SDKs share with the Go worker's configuration.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

# The worker protocol version this SDK speaks (docs/protocol.md), announced
# in every heartbeat.
PROTOCOL_VERSION = 1

# Result outcomes and failure reasons.
COMPLETED = "completed"
FAILED = "failed"
RELEASED = "released"
PROGRESS = "progress"

REASON_ERROR = "error"
REASON_PERMANENT = "permanent"
REASON_TIMEOUT = "timeout"
REASON_CANCELED = "canceled"

OP_CANCEL = "cancel"

MAX_PROGRESS = 100
MAX_PROGRESS_MESSAGE = 200  # characters

# The first byte of a delivery in one of the Go worker's binary codecs. This
# SDK announces codec 0 (JSON) and so is sent JSON only.
BINARY_MAGIC = (0x01, 0x02)

# Bounds the heartbeat stream, as the Go worker does.
HEARTBEAT_STREAM_LEN = 10_000


class Keys:
    """The Redis keys of one worker, under an optional prefix."""

    def __init__(self, prefix: str, worker_id: str) -> None:
        self.jobs = f"{prefix}dts:worker:{worker_id}:jobs"
        self.control = f"{prefix}dts:worker:{worker_id}:control"
        self.results = f"{prefix}dts:results"
        self.heartbeats = f"{prefix}dts:heartbeats"


# Go's zero time, which a progress report carries as finished_at.
ZERO_TIME = "0001-01-01T00:00:00Z"


def rfc3339(t: float) -> str:
    """Formats a Unix time (seconds) as RFC 3339 in UTC with microseconds."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: object) -> datetime | None:
    """Parses an RFC 3339 time as Go writes it; None if it is not one."""
    if not isinstance(s, str):
        return None
    try:
        return datetime.fromisoformat(s)
    except ValueError:
        return None


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(s: str) -> float:
    """Parses a Go duration ("1s", "200ms", "1m30s", "0") into seconds.

    Raises ValueError for anything else, naming the text.
    """
    text = s.strip()
    if text in ("0", "+0", "-0"):
        return 0.0
    sign = 1.0
    if text[:1] in ("+", "-"):
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    total, pos = 0.0, 0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            raise ValueError(f"invalid duration {s!r}")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos == 0:
        raise ValueError(f"invalid duration {s!r}")
    return sign * total

# Bounds of a job's log lines (docs/protocol.md, "Logs"): an attempt keeps
# its newest MAX_ATTEMPT_LOG_BYTES, a line counting its message's bytes plus
# LOG_LINE_OVERHEAD; a message is cut at MAX_LOG_LINE_BYTES.
MAX_ATTEMPT_LOG_BYTES = 64 << 10
MAX_LOG_LINE_BYTES = 8 << 10
LOG_LINE_OVERHEAD = 32
