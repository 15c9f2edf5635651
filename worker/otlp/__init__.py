"""OpenTelemetry in and out: GenAI spans from the Collector's Kafka topic as alignment
turns (`decode`, `mapping`), results as `gen_ai.evaluation.result` log records
(`evaluation`, `sink`). Pure except `sink`, which sends."""
