"""The one formatter of pydantic validation errors: `field.path: reason` per problem."""

from __future__ import annotations

from collections.abc import Collection

from pydantic import ValidationError


def error_lines(
    exc: ValidationError,
    root: str,
    drop_tags: Collection[str] = (),
    tag_field: str | None = None,
) -> list[str]:
    """`field: reason` for each error of `exc`; `root` names an error of the whole value.

    `drop_tags`: tags of a tagged union removed from the front of a location (the suite
    of an envelope); `tag_field`: the field named for an unknown tag.
    """
    lines = []
    for error in exc.errors():
        loc = list(error["loc"])
        if loc and loc[0] in drop_tags:
            loc = loc[1:]
        if tag_field is not None and error["type"] == "union_tag_invalid":
            loc = [tag_field]
        field = ".".join(str(part) for part in loc) or root
        lines.append(f"{field}: {error['msg']}")
    return lines


def describe_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """`payload.output.signals: Input should be a valid list; ...` (the first `limit`
    problems of a record, then how many more)."""
    lines = error_lines(exc, root="(record)")
    more = len(lines) - limit
    return "; ".join([*lines[:limit], *([f"... and {more} more"] if more > 0 else [])])


__all__ = ["describe_validation_error", "error_lines"]
