"""How an alignment report is drawn: the console tables and the Markdown document.
Outside the pure core: `report.py` knows nothing of it."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from worker.suites.alignment.report import SUMMARY_METRICS, AlignmentReport, format_estimate
from worker.suites.alignment.spec import SESSION_METRICS
from worker.suites.markdown import bullet_section


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_console(report: AlignmentReport, console: Console, verbose: bool = False) -> None:
    """Per-persona table with bootstrap CIs, sessions when `verbose`, judge and errors."""
    table = Table(title="Brand voice alignment (95% bootstrap CI over sessions)")
    table.add_column("persona")
    table.add_column("sessions", justify="right")
    for metric in SUMMARY_METRICS:
        table.add_column(metric)
    table.add_column("grade", justify="center")
    rows = [*report.by_persona().items(), ("all", report.summary())]
    for name, summary in rows:
        table.add_row(
            name,
            str(summary["sessions"]),
            *(format_estimate(summary[metric]) for metric in SUMMARY_METRICS),
            summary["grade"] or "-",
            end_section=name == rows[-2][0] if len(rows) > 1 else False,
        )
    console.print(table)
    sessions = Table(title="Sessions")
    for column in ("session", "persona", "turns", *SUMMARY_METRICS, "grade", "violations"):
        sessions.add_column(column)
    for session in report.sessions:
        scores = session["scores"]
        sessions.add_row(
            session["session_id"],
            session["persona_id"],
            str(session["turns"]),
            *(_fmt(scores[metric]) for metric in SUMMARY_METRICS),
            session["grade"] or "-",
            str(len(session["details"]["violations"])),
        )
    console.print(sessions)
    for session in report.sessions:
        note = session["details"].get("stability_note")
        if note:
            console.print(f"note: {session['session_id']}: {note}", highlight=False)
    if verbose:
        for turn in report.turns:
            details = turn["details"]
            console.print(
                f"{turn['session_id']}#{turn['turn_index']}: "
                f"style {_fmt(turn['scores']['style_sim'])}, "
                f"traits {_fmt(turn['scores']['traits'])} "
                f"(mismatched: {', '.join(details['mismatched_traits']) or 'none'}), "
                f"lexicon {_fmt(turn['scores']['lexicon'])}"
            )
    for session in report.sessions:
        for violation in session["details"]["violations"]:
            console.print(
                f"[red]violation[/red] {session['session_id']}#{violation['turn_index']}: "
                f"{violation['category']} ({violation['severity']}): "
                f"{violation['match']!r}"
            )
    if report.judge:
        console.print(f"judge: {report.judge}")
    for error in report.errors:
        console.print(f"[red]error[/red] {error['source']}: {error['message']}")


def render_markdown(report: AlignmentReport) -> str:
    """The report as a Markdown document."""
    lines = ["# Brand voice alignment report", ""]
    summary = report.summary()
    lines += [
        f"{summary['sessions']} sessions, {summary['turns']} assistant turns, "
        f"overall grade **{summary['grade'] or '-'}**. Means with 95% bootstrap CIs "
        "over sessions.",
        "",
        "| persona | sessions | " + " | ".join(SUMMARY_METRICS) + " | grade |",
        "| --- | ---: | " + " | ".join("---" for _ in SUMMARY_METRICS) + " | :---: |",
    ]
    for name, group in [*report.by_persona().items(), ("**all**", summary)]:
        cells = " | ".join(format_estimate(group[metric]) for metric in SUMMARY_METRICS)
        lines.append(f"| {name} | {group['sessions']} | {cells} | {group['grade'] or '-'} |")
    lines += ["", "## Sessions", ""]
    lines.append("| session | persona | turns | " + " | ".join(SESSION_METRICS) + " | grade |")
    lines.append(
        "| --- | --- | ---: | " + " | ".join("---:" for _ in SESSION_METRICS) + " | :---: |"
    )
    for session in report.sessions:
        cells = " | ".join(_fmt(session["scores"][m]) for m in SESSION_METRICS)
        lines.append(
            f"| {session['session_id']} | {session['persona_id']} | {session['turns']} | "
            f"{cells} | {session['grade'] or '-'} |"
        )
    notes = [
        (session["session_id"], session["details"]["stability_note"])
        for session in report.sessions
        if session["details"].get("stability_note")
    ]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- `{session_id}`: {note}" for session_id, note in notes]
    violations = [
        (session["session_id"], violation)
        for session in report.sessions
        for violation in session["details"]["violations"]
    ]
    if violations:
        lines += ["", "## Safety violations", ""]
        for session_id, v in violations:
            lines.append(
                f"- `{session_id}` turn {v['turn_index']}: {v['category']} "
                f'({v["severity"]}): "{v["match"]}"'
            )
    if report.errors:
        errors = (f"{error['source']}: {error['message']}" for error in report.errors)
        lines += bullet_section("Rows not scored", errors)
    return "\n".join(lines) + "\n"


class AlignmentBatchReport(AlignmentReport):
    """The alignment `BatchReport` of `scorestream score`, drawn by this module."""

    render_console = render_console
    to_markdown = render_markdown
