"""What the tests of the Redis boundary share: a broker of the test's group, on both tiers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from trunner._redis import Broker, open_transport
from trunner._wire.keys import Keys


@pytest.fixture
async def broker(url: str, keys: Keys) -> AsyncIterator[Broker]:
    """A broker of the test's group on ``url``, its consumer group created."""
    async with open_transport(
        url, client_name="test", max_connections=4, connect_timeout=5.0
    ) as transport:
        broker = Broker(transport, keys)
        await broker.ensure_group()
        await broker.ensure_group()  # creating twice is fine
        yield broker
