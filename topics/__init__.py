"""Topic catalog and provisioning."""

from topics.catalog import (
    AGGREGATES,
    CATALOG,
    DEAD_LETTERS,
    GATES,
    INPUT,
    RESULTS,
    TopicSpec,
    record_key,
    topic_names,
)

__all__ = [
    "AGGREGATES",
    "CATALOG",
    "DEAD_LETTERS",
    "GATES",
    "INPUT",
    "RESULTS",
    "TopicSpec",
    "record_key",
    "topic_names",
]
