"""Talking to the broker from the commands: a bounded wait and one clear error.

`BrokerUnavailable` carries a one-line message; the command line prints it and exits 3.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from aiokafka.errors import KafkaConnectionError, KafkaError

T = TypeVar("T")


class BrokerUnavailable(RuntimeError):
    """The broker is absent, refuses, or does not answer in time."""


async def within(step: Awaitable[T], bootstrap: str, timeout: float, what: str) -> T:
    """Await `step`; a connection error or no answer within `timeout` seconds becomes
    `BrokerUnavailable` naming the broker and what was being done."""
    try:
        return await asyncio.wait_for(step, timeout)
    except TimeoutError:
        raise BrokerUnavailable(
            f"the Kafka broker at {bootstrap} did not answer within {timeout:g}s while "
            f"{what} (stream.connect_timeout)"
        ) from None
    except KafkaConnectionError:
        raise BrokerUnavailable(
            f"cannot connect to the Kafka broker at {bootstrap} while {what} "
            "(is it running, is the address right?)"
        ) from None
    except (KafkaError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        raise BrokerUnavailable(
            f"cannot reach the Kafka broker at {bootstrap} while {what}: {reason}"
        ) from None


__all__ = ["BrokerUnavailable", "within"]
