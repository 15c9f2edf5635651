"""How an extraction report is drawn: the console tables and the Markdown document.
Outside the pure core: `report.py` knows nothing of it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from worker.suites.extraction.aggregate import COT_RATE_NAMES, QUALITY_RATE_NAMES
from worker.suites.extraction.report import ExtractionResults, detail_at
from worker.suites.markdown import bullet_section


def render_console(report: ExtractionResults, console: Console, verbose: bool = False) -> None:
    """Main table, parse / schema / hallucination figures, then CoT diagnostics."""
    m = report.metrics
    console.rule("[bold]Event extraction")
    console.print(
        f"{len(report.outcomes)} cases, {len(report.scored)} scored, {len(report.failed)} failed"
        f"  (protocol {report.settings.protocol_version},"
        f" metrics {report.settings.metrics_version})"
    )
    main = Table(title="Micro-averaged P / R / F1")
    for column in ("mode", "precision", "recall", "F1", "tp", "pred", "gold"):
        main.add_column(column, justify="left" if column == "mode" else "right")
    for prefix, title in (("strict", "Strict"), ("relaxed", "Relaxed"), ("type", "Type")):
        main.add_row(
            title,
            f"{m[f'{prefix}_precision']:.4f}",
            f"{m[f'{prefix}_recall']:.4f}",
            f"[bold]{m[f'{prefix}_f1']:.4f}[/bold]",
            str(report.counts[f"{prefix}_tp"]),
            str(report.counts[f"{prefix}_pred_total"]),
            str(report.counts[f"{prefix}_gold_total"]),
        )
    console.print(main)

    figures = Table(title="Parse, schema and hallucination")
    figures.add_column("figure")
    figures.add_column("count", justify="right")
    figures.add_column("rate", justify="right")
    total = report.counts["total_samples"]
    for label, count, rate in (
        ("parsed without repair", "parse_raw_success", "parse_raw_success_rate"),
        ("parsed after repair", "parse_repair_success", "parse_repair_success_rate"),
        ("parse errors", "parse_errors", "parse_error_rate"),
        ("no JSON found", "parse_extraction_failures", "parse_extraction_failure_rate"),
        ("schema compliant", "schema_compliant", "schema_compliance_rate"),
        ("cases with hallucination", "hallucination_samples", "hallucination_rate"),
    ):
        figures.add_row(label, f"{report.counts[count]} / {total}", f"{m[rate]:.4f}")
    figures.add_row(
        "hallucinated arguments",
        f"{report.counts['hallucinated_entities']} / {report.counts['total_entities']}",
        f"{m['hallucination_entity_rate']:.4f}",
    )
    console.print(figures)
    details = [
        ("extraction methods", report.parse_methods()),
        ("repair steps tried", report.repair_steps()),
        ("schema violations", report.schema_violations()),
        ("hallucinated event_type|role", report.hallucination_breakdown()),
    ]
    for title, values in details:
        if values:
            text = ", ".join(f"{key} {value}" for key, value in values.items())
            console.print(f"[dim]{title}:[/dim] {text}")

    console.rule("[bold]Diagnostics (CoT, not a main claim)")
    cot = Table()
    cot.add_column("figure")
    cot.add_column("value", justify="right")
    checked = report.counts["cot_checked"]
    if not report.settings.metrics.cot.enabled:
        console.print("CoT checks are disabled (metrics.cot.enabled=false).")
    else:
        for name in ("cot_type_consistency", "cot_argument_consistency", "cot_faithfulness"):
            cot.add_row(name, f"{m[name]:.4f}")
        cot.add_row(
            "cot_coverage_rate",
            f"{m['cot_coverage_rate']:.4f}  ({checked} checked, "
            f"{report.counts['cot_skipped']} skipped, {report.counts['cot_parse_fail']}"
            " parse failures)",
        )
        console.print(cot)

    if verbose and report.scored:
        cases = Table(title="Cases")
        for column in ("id", "method", "strict F1", "relaxed F1", "type F1", "schema"):
            cases.add_column(column)
        for outcome in report.scored:
            assert outcome.scored is not None
            scores = outcome.scored.scores
            violation = detail_at(outcome.scored.details, "schema", "violation")
            cases.add_row(
                outcome.id,
                str(outcome.scored.counts.get("parse_method", "")),
                f"{scores['strict_f1'] or 0:.3f}",
                f"{scores['relaxed_f1'] or 0:.3f}",
                f"{scores['type_f1'] or 0:.3f}",
                "ok" if violation is None else str(violation),
            )
        console.print(cases)
    for outcome in report.failed:
        console.print(f"[red]not scored[/red] {outcome.id} ({outcome.source}): {outcome.error}")


def render_markdown(report: ExtractionResults) -> str:
    """The report as a Markdown document."""
    m, c = report.metrics, report.counts
    lines = [
        "# Event extraction report",
        "",
        f"{len(report.outcomes)} cases, {len(report.scored)} scored, {len(report.failed)} failed."
        f" Protocol {report.settings.protocol_version}, metrics"
        f" {report.settings.metrics_version}.",
        "",
        "## Main table (micro-averaged)",
        "",
        "| mode | precision | recall | F1 | tp | pred | gold |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for prefix, title in (("strict", "Strict"), ("relaxed", "Relaxed"), ("type", "Type")):
        lines.append(
            f"| {title} | {m[f'{prefix}_precision']:.4f} | {m[f'{prefix}_recall']:.4f}"
            f" | {m[f'{prefix}_f1']:.4f} | {c[f'{prefix}_tp']} | {c[f'{prefix}_pred_total']}"
            f" | {c[f'{prefix}_gold_total']} |"
        )
    lines += [
        "",
        "## Parse, schema and hallucination",
        "",
        "| metric | value |",
        "| --- | ---: |",
    ]
    for name in QUALITY_RATE_NAMES:
        lines.append(f"| {name} | {m[name]:.4f} |")
    for name in (
        "parse_raw_success",
        "parse_repair_success",
        "parse_errors",
        "parse_extraction_failures",
        "total_samples",
    ):
        lines.append(f"| {name} | {m[name]} |")
    for title, values in (
        ("Extraction methods", report.parse_methods()),
        ("Schema violations", report.schema_violations()),
        ("Hallucinated arguments by event_type|role", report.hallucination_breakdown()),
    ):
        if values:
            lines += ["", f"**{title}:** " + ", ".join(f"`{k}` {v}" for k, v in values.items())]
    lines += ["", "## Diagnostics: CoT (not a main claim)", ""]
    if report.settings.metrics.cot.enabled:
        lines += ["| metric | value |", "| --- | ---: |"]
        for name in COT_RATE_NAMES:
            lines.append(f"| {name} | {m[name]:.4f} |")
        for name in ("cot_checked", "cot_skipped", "cot_parse_fail"):
            lines.append(f"| {name} | {m[name]} |")
    else:
        lines.append("CoT checks are disabled.")
    if report.failed:
        lines += bullet_section(
            "Not scored", (f"`{o.id}` ({o.source}): {o.error}" for o in report.failed)
        )
    return "\n".join(lines) + "\n"


class ExtractionReport(ExtractionResults):
    """The extraction `BatchReport` of `scorestream score`, drawn by this module."""

    render_console = render_console
    to_markdown = render_markdown
