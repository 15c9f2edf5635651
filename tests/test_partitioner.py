"""The worker's key partitioner sends every key where Kafka's default partitioner would."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner, murmur2

from worker.stream.partitioner import murmur2 as fast_murmur2
from worker.stream.partitioner import partition_for_key


def test_murmur2_matches_the_java_client_on_known_keys() -> None:
    # Values from Kafka's own UtilsTest (signed ints there): same bits here.
    known = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536}
    for key, expected in known.items():
        assert fast_murmur2(key) == expected & 0xFFFFFFFF


@pytest.mark.parametrize("length", range(0, 41))
def test_every_key_lands_on_the_default_partitioners_partition(length: int) -> None:
    rng = random.Random(length)
    default = DefaultPartitioner()
    for count in (1, 4, 7, 12):
        partitions = list(range(count))
        for _ in range(50):
            key = rng.randbytes(length)
            assert fast_murmur2(key) == murmur2(key) & 0xFFFFFFFF
            assert partition_for_key(key, partitions, partitions) == default(
                key, partitions, partitions
            )


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    assert partition_for_key(None, [0, 1, 2], [2]) == 2
    assert partition_for_key(None, [0, 1, 2], []) in {0, 1, 2}
