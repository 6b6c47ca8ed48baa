"""dtsched: workers and a client for dts, the distributed job scheduler.

Worker runs handlers for jobs the coordinator leases to it over Redis (the
worker protocol, docs/protocol.md); Client submits and reads jobs through the
submitter's HTTP API (docs/api.md).
"""

import logging

from ._wire import parse_duration
from .client import APIError, Client, Submitted
from .job import Cancelled, Job, Permanent
from .worker import VERSION as __version__
from .worker import Worker, parse_queues

# A library logs through logging and leaves the output to the application.
logging.getLogger("dtsched").addHandler(logging.NullHandler())

__all__ = [
    "APIError",
    "Cancelled",
    "Client",
    "Job",
    "Permanent",
    "Submitted",
    "Worker",
    "__version__",
    "parse_duration",
    "parse_queues",
]
