"""The `scorestream` command line. Each command's work lives in `worker.commands.*`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from worker.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, UsageError
from worker.ops.allocator import keep_freed_memory


class _Parser(argparse.ArgumentParser):
    """argparse with the usage-error exit code: 3, never argparse's 2 (which means Review)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _kafka_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", help="kafka://host:port (else SCORESTREAM_BROKER, config)")
    parser.add_argument("--config", help="YAML config file (else SCORESTREAM_CONFIG)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"scorestream {version('scorestream')}"
    except PackageNotFoundError:
        return "scorestream (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from worker.suites import registry

    suites = sorted(registry.names())
    parser = _Parser(prog="scorestream", description="Streaming scorer for LLM output.")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    score = commands.add_parser("score", help="score files offline")
    score.add_argument("files", nargs="+", metavar="FILE")
    score.add_argument("--suite", choices=suites)
    score.add_argument("--config", help="YAML config file (else SCORESTREAM_CONFIG)")
    score.add_argument(
        "--format", default="console", choices=["console", "json", "markdown", "all"]
    )
    score.add_argument("--output", help="report path (json) or directory (all)")
    score.add_argument("--strict-ah", action="store_true", help="binary AH scoring")
    score.add_argument("--concern", help="score only cases with this concern_id")
    score.add_argument("--judge", action="store_true", help="use the configured safety judge")
    score.add_argument("--verbose", action="store_true")

    worker = commands.add_parser("worker", help="run the streaming worker")
    _kafka_options(worker)
    worker.add_argument(
        "--log-format", choices=["text", "json"], help="log lines as text or JSON (else config)"
    )

    demo = commands.add_parser("demo", help="embedded broker, worker and example stream")
    demo.add_argument("--follow", action="store_true", help="keep running after the replay")
    demo.add_argument("--config", help="YAML config file")

    produce = commands.add_parser("produce", help="publish a JSONL file to the input topic")
    produce.add_argument("file", metavar="FILE")
    produce.add_argument("--topic", help="topic (default: the input topic)")
    produce.add_argument("--rate", type=float, help="records per second (default: as fast)")
    produce.add_argument(
        "--retime",
        action="store_true",
        help="shift every ts by the same amount so that the file ends now (history counts "
        "into its windows when produced before the worker starts)",
    )
    produce.add_argument(
        "--as-otlp",
        action="store_true",
        help="write the alignment turns as GenAI chat spans, as the OpenTelemetry "
        "Collector's Kafka exporter would, to sources.otlp.topic (default otlp_spans)",
    )
    _kafka_options(produce)

    topics = commands.add_parser("topics", help="provision or show the catalog's topics")
    topics.add_argument("action", choices=["create", "list"])
    _kafka_options(topics)

    results = commands.add_parser(
        "results",
        help="print the results of a window and segment, or the cases behind a gate",
        description="Read the results topic and print the cases of a window and segment "
        "(--suite, --window-start, --window, --segment), the worst cases behind a gate's "
        "latest firing (--gate NAME [--segment k=v], from the gates topic) or the worst "
        "cases a gate event lists (--gate-event FILE, - for stdin). Exit 1 when a listed "
        "case is not found or the gate has not fired.",
    )
    results.add_argument("--suite", choices=suites)
    results.add_argument("--window-start", help="RFC 3339 start, e.g. 2026-01-01T12:00:00Z")
    results.add_argument("--window", help="window size, e.g. 1m")
    results.add_argument(
        "--segment", action="append", help="key=value[,key=value] (default: all cases)"
    )
    results.add_argument(
        "--gate", metavar="NAME", help="the gate's latest firing (of --segment, if given)"
    )
    results.add_argument("--gate-event", metavar="FILE", help="a gate event JSON file, or -")
    results.add_argument("--metric", help="order by this metric, worst first")
    results.add_argument("--limit", type=int, help="print at most this many cases")
    results.add_argument("--format", default="console", choices=["console", "json"])
    _kafka_options(results)

    gates = commands.add_parser(
        "gates",
        help="gate events from the gates topic: latest state per gate and segment",
        description="Read the gates topic and print the latest event of each gate and "
        "segment, or with --since every event from then on, oldest first.",
    )
    gates.add_argument("--since", metavar="T", help="a duration back from now (2h) or RFC 3339")
    gates.add_argument("--gate", metavar="NAME", help="only this gate")
    gates.add_argument("--format", default="table", choices=["table", "json"])
    _kafka_options(gates)

    broker = commands.add_parser(
        "broker",
        help="run the embedded broker in the foreground (local streaming without Docker)",
        description="Run the embedded Kafka-compatible broker (Tansu, in memory) until "
        "Ctrl-C, and print the settings a worker needs on it.",
    )
    broker.add_argument(
        "--port", type=int, help="TCP port (default: the port of --broker / config, else 9092)"
    )
    broker.add_argument("--host", default="127.0.0.1", help="address to listen on")
    _kafka_options(broker)

    models = commands.add_parser(
        "models",
        help="build or check the fitted models the package ships",
        description="Fit the safety classifier on the shipped training data and write its "
        "artefact (build), or compare a built artefact with the committed digests (check).",
    )
    models.add_argument("action", choices=["build", "check"])
    models.add_argument(
        "--record", action="store_true", help="build: write the digests to commit as well"
    )

    compare = commands.add_parser("compare", help="regression report of two JSON reports")
    compare.add_argument("baseline", metavar="BASELINE")
    compare.add_argument("candidate", metavar="CANDIDATE")
    compare.add_argument("--tolerance", type=float, default=0.0)
    compare.add_argument("--format", default="console", choices=["console", "json"])
    return parser


HANDLERS = {
    "score": "worker.commands.score",
    "compare": "worker.commands.compare",
    "worker": "worker.commands.stream",
    "produce": "worker.commands.stream",
    "topics": "worker.commands.stream",
    "demo": "worker.commands.demo",
    "results": "worker.commands.results",
    "gates": "worker.commands.gates",
    "broker": "worker.commands.broker",
    "models": "worker.commands.models",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `scorestream` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    # aiokafka logs each failed connection attempt; without a configured handler Python
    # would print those to stderr next to our one-line error. (The worker's logging
    # configuration still receives them through the root logger.)
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    keep_freed_memory()  # a long turn's arrays reuse the last one's pages (glibc)
    module = importlib.import_module(HANDLERS[args.command])
    handler = getattr(module, f"run_{args.command}")
    from worker.ops.connection import BrokerUnavailable

    try:
        return int(handler(args))
    except (UsageError, BrokerUnavailable) as exc:
        print(f"scorestream {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
