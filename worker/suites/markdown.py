"""Markdown building blocks shared by the suites' report renderers."""

from __future__ import annotations

from collections.abc import Iterable


def bullet_section(title: str, bullets: Iterable[str]) -> list[str]:
    """Lines of a `## title` section holding one `- bullet` line per item."""
    return ["", f"## {title}", "", *(f"- {bullet}" for bullet in bullets)]
