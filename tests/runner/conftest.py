"""Fixtures of the runner tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..support.servers import RedisServer
from ..support.workers import Worker


@pytest.fixture
def workers(redis_server: RedisServer) -> Iterator[list[Worker]]:
    """The worker processes a test starts (on the suite's real Redis): each is closed
    (killed if it still runs) at the end of the test."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.close()
