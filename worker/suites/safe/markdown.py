"""The SAFE v0 markdown report (seed 004 section 5.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.suites.safe.report import SafeBatchReport


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _pct(rate: float) -> str:
    return f"{round(100 * rate)}%"


def render_markdown(report: SafeBatchReport) -> str:
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
