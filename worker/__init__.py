"""scorestream worker: scoring suites, aggregation, gates, telemetry, streaming app and CLI."""

__version__ = "0.1.0"
