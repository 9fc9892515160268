"""The error for a caller's input a model cannot use, as opposed to a fault of the model itself.

Why a type of its own: the service answers this one as the caller's fault (a 422 naming the field)
and any other exception, a ValueError from a bug included, as its own (a 500 with a logged id).
It subclasses ValueError, so code that catches ValueError keeps working.
"""

from __future__ import annotations


class InputValidationError(ValueError):
    """`field` (the argument: context_x, query_x, levels, ...) cannot be used: `message` says why,
    `expected` what would do; str() is "field: message", as the plain ValueErrors said before."""

    def __init__(self, field: str, message: str, expected: str | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.expected = field, message, expected

    def __reduce__(self) -> tuple[type[InputValidationError], tuple[str, str, str | None]]:
        # pickles whole: the GP's worker process sends it to the server
        return type(self), (self.field, self.message, self.expected)


class RowsRefused(InputValidationError):
    """Some rows of `field` cannot be used, for one `reason`: `rows` are their 0-based indices in what
    the model was given, so a caller that passed a slice can name them in its own numbering."""

    def __init__(self, field: str, rows: list[int], reason: str, expected: str | None = None) -> None:
        super().__init__(field, f"rows {rows_text(rows)}: {reason}", expected)
        self.rows, self.reason = rows, reason

    def __reduce__(self) -> tuple[type[RowsRefused], tuple[str, list[int], str, str | None]]:  # type: ignore[override]
        # whole, rows included: a pool worker process sends it, and the server renumbers the rows (a block's
        # into the request's, an Arrow table's from 1)
        return RowsRefused, (self.field, self.rows, self.reason, self.expected)


ROWS_SHOWN = 10  # row numbers an error lists; beyond them it says how many there are in all


def rows_text(rows: list[int], shown: int = ROWS_SHOWN, total: int | None = None) -> str:
    """The first `shown` row numbers as a list, then '...' and how many in all when there are more (`total`:
    how many there are, where `rows` holds only the first of them)."""
    total = len(rows) if total is None else total
    return f"{rows[:shown]}{f' ... ({total} rows in all)' if total > shown else ''}"
