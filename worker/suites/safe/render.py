"""How a SAFE report is drawn: the console scorecard (seed 004 section 5.2, with rich) and
the markdown report (section 5.3). Outside the pure core: `report.py` knows nothing of it.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from worker.suites.safe.report import SafeReport
from worker.suites.safe.scoring import detail_terms

# ---------------------------------------------------------------- console

INNER_WIDTH = 71  # characters between the double bars, as in the seed
COLUMN_WIDTHS = (8, 12, 11)  # Metric, Mean Score, Pass Rate; Status takes the rest
LEVEL_STYLES = {"OK": "green", "WARN": "yellow", "FAIL": "bold red"}
LABEL_STYLES = {"Pass": "green", "Review": "yellow", "Fail": "bold red"}


def _percent(part: int, whole: int) -> str:
    return f"{round(100 * part / whole) if whole else 0}%"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def scorecard_lines(report: SafeReport) -> list[Text]:
    """The boxed summary: title, label counts, per-metric table, composite."""
    distribution = report.label_distribution()
    total = len(report.cases)
    title = f"SAFE v0 Scorecard - {report.concern_id or 'all'}"
    counts = (
        f" Total Cases: {total}    "
        f"Pass: {distribution['Pass']} ({_percent(distribution['Pass'], total)})    "
        f"Review: {distribution['Review']} ({_percent(distribution['Review'], total)})    "
        f"Fail: {distribution['Fail']} ({_percent(distribution['Fail'], total)})"
    )
    statuses = report.metric_statuses()
    status_width = max(
        [INNER_WIDTH - sum(COLUMN_WIDTHS) - 3] + [len(s.status) + 2 for s in statuses]
    )
    width = max(INNER_WIDTH, len(counts) + 1, len(title) + 2, sum(COLUMN_WIDTHS) + 3 + status_width)
    status_width = width - sum(COLUMN_WIDTHS) - 3
    metric_w, mean_w, rate_w = COLUMN_WIDTHS

    def row(text: str | Text) -> Text:
        body = Text(text) if isinstance(text, str) else text
        body.pad_right(width - body.cell_len)
        return Text("║") + body + Text("║")

    rule = Text("╠" + "═" * width + "╣")
    lines = [
        Text("╔" + "═" * width + "╗"),
        row(Text(title.center(width), style="bold")),
        rule,
        row(counts),
        rule,
        row(" Metric │ Mean Score │ Pass Rate │ Status"),
        Text("╠" + "┼".join("─" * w for w in (metric_w, mean_w, rate_w, status_width)) + "╣"),
    ]
    mean_composite = report.aggregator.mean_scores(report.state)["composite"]
    for status in statuses:
        cells = Text(
            f"{status.metric.center(metric_w)}│{f'{status.mean:.2f}'.center(mean_w)}│"
            f"   {f'{round(100 * status.pass_rate)}%':<{rate_w - 3}}│ "
        )
        cells.append(status.status, style=LEVEL_STYLES.get(status.level, ""))
        lines.append(row(cells))
    lines += [
        rule,
        row(f" Composite: {mean_composite:.2f}"),
        Text("╚" + "═" * width + "╝"),
    ]
    return lines


def case_table(report: SafeReport) -> Table:
    """The per-case breakdown table (with a Model column when models differ)."""
    table = Table(box=box.SQUARE, show_edge=True, pad_edge=True)
    models = {case.model for case in report.cases}
    show_model = len(models) > 1  # the same test answered by several models
    table.add_column("Test ID", min_width=15, no_wrap=True)
    if show_model:
        table.add_column("Model", no_wrap=True)
    table.add_column("Archetype", min_width=21, no_wrap=True)
    for metric in ("CR", "AH", "AC"):
        table.add_column(metric, justify="center", min_width=4)
    table.add_column("Label", min_width=7)
    for case in report.cases:
        scores = case.scored.scores
        label = case.scored.label or ""
        table.add_row(
            case.test_id,
            *([case.model or "-"] if show_model else []),
            case.archetype,
            *(f"{float(scores[m] or 0.0):.2f}" for m in ("CR", "AH", "AC")),
            Text(label.upper(), style=LABEL_STYLES.get(label, "")),
        )
    return table


def top_issue_lines(report: SafeReport, limit: int = 1) -> list[str]:
    """`CR Misses: "term" (N cases)` and the like, `limit` terms per metric."""
    misses = report.common_misses()
    lines = []
    for metric, heading in (("CR", "CR Misses"), ("AH", "AH Violations"), ("AC", "AC Misses")):
        top = misses[metric][:limit]
        text = ", ".join(f'"{term}" ({_plural(n, "case")})' for term, n in top) or "none"
        lines.append(f"  {heading}: {text}")
    return lines


def render_scorecard(report: SafeReport, console: Console, verbose: bool = False) -> None:
    """Print the scorecard, the per-case breakdown and the top issues."""
    for line in scorecard_lines(report):
        console.print(line, no_wrap=True, crop=False, overflow="ignore", highlight=False)
    console.print()
    console.print("Per-Case Breakdown:", highlight=False)
    console.print(case_table(report))
    console.print()
    console.print("Top Issues:", highlight=False)
    for issue in top_issue_lines(report, limit=5 if verbose else 1):
        console.print(issue, highlight=False, markup=False)
    if verbose:
        console.print()
        console.print("Details:", highlight=False)
        for case in report.cases:
            console.print(
                f"  {case.test_id} [{case.scored.label}] "
                f"CR missing: {detail_terms(case.scored, 'CR', 'missing')}  "
                f"AH violations: {detail_terms(case.scored, 'AH', 'violations')}  "
                f"AC missing: {detail_terms(case.scored, 'AC', 'missing')}",
                highlight=False,
                markup=False,
            )


# ---------------------------------------------------------------- markdown


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _pct(rate: float) -> str:
    return f"{round(100 * rate)}%"


def render_markdown(report: SafeReport) -> str:
    """The whole report as GitHub-flavoured markdown."""
    data = report.to_json()
    summary = data["summary"]
    total = summary["total_cases"]
    lines = [
        f"# SAFE v0 Scorecard - {data['concern_id'] or 'all'}",
        "",
        f"- Generated: {data['generated_at']}",
        f"- Batch: {data['batch_id'] or '-'}",
        f"- AH mode: {'strict' if data['config']['strict_ah'] else 'proportional'}",
        "",
        "## Summary",
        "",
        *_table(
            ["Total", "Pass", "Review", "Fail", "Pass rate"],
            [
                [
                    total,
                    summary["pass"],
                    summary["review"],
                    summary["fail"],
                    _pct(summary["overall_pass_rate"]),
                ]
            ],
        ),
        "",
        "## Metrics",
        "",
        *_table(
            ["Metric", "Mean Score", "Pass Rate", "Status"],
            [
                [s.metric, f"{s.mean:.2f}", _pct(s.pass_rate), s.status]
                for s in report.metric_statuses()
            ],
        ),
        "",
        f"Composite: {data['mean_scores']['composite']:.2f}",
        "",
        "## By archetype",
        "",
        *_table(
            ["Archetype", "Count", "Mean CR", "Mean AH", "Mean AC", "Pass rate"],
            [
                [
                    name,
                    group["count"],
                    f"{group['mean_CR']:.2f}",
                    f"{group['mean_AH']:.2f}",
                    f"{group['mean_AC']:.2f}",
                    _pct(group["pass_rate"]),
                ]
                for name, group in data["by_archetype"].items()
            ],
        ),
        "",
        "## Per-case breakdown",
        "",
        *_table(
            ["Test ID", "Archetype", "CR", "AH", "AC", "Composite", "Label"],
            [
                [
                    r["test_id"],
                    r["archetype"],
                    *(f"{r['scores'][m]:.2f}" for m in ("CR", "AH", "AC", "composite")),
                    (r["label"] or "").upper(),
                ]
                for r in data["results"]
            ],
        ),
        "",
        "## Failure analysis",
        "",
        "### Worst performers",
        "",
        *_table(
            ["Test ID", "Composite", "Label", "CR missing", "AH violations", "AC missing"],
            [
                [
                    r["test_id"],
                    f"{r['scores']['composite']:.2f}",
                    r["label"],
                    ", ".join(r["details"]["CR"]["missing"]) or "-",
                    ", ".join(r["details"]["AH"]["violations"]) or "-",
                    ", ".join(r["details"]["AC"]["missing"]) or "-",
                ]
                for r in data["failure_analysis"]["worst_performers"]
            ],
        ),
    ]
    analysis = data["failure_analysis"]
    for title, key, term_key, count_key in (
        ("Common CR misses", "common_CR_misses", "signal", "miss_count"),
        ("Common AH violations", "common_AH_violations", "term", "count"),
        ("Common AC misses", "common_AC_misses", "phrase", "miss_count"),
    ):
        lines += ["", f"### {title}", ""]
        entries = analysis[key]
        lines += [f"- {_cell(e[term_key])}: {e[count_key]}" for e in entries] or ["- none"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the batch report


class SafeBatchReport(SafeReport):
    """The SAFE `BatchReport` of `scorestream score`, drawn by this module."""

    render_console = render_scorecard
    to_markdown = render_markdown
