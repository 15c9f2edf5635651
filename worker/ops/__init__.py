"""Running the worker: metrics, lag, logs, the embedded broker, connections, topic watch."""
