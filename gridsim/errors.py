"""The one error a network that cannot be served raises, shared by the readers and the snapshot."""

from __future__ import annotations


class NetworkError(ValueError):
    """A network that cannot be served: `field` names the net's table (or column), `problem` what is wrong."""

    def __init__(self, field: str, problem: str, expected: str | None = None) -> None:
        self.field, self.problem, self.expected = field, problem, expected
        super().__init__(f"{field}: {problem}" + (f" (expected {expected})" if expected else ""))
