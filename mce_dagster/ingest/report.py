"""What one ingestion call did: rows read and placed, sessions written, merged or
unchanged, and every row not placed with its reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


def _kind_of(reason: str) -> str:
    return reason.split(":")[0].split("(")[0].strip()[:80]


@dataclass(frozen=True)
class RowProblem:
    path: str
    index: int
    reason: str
    span_id: str | None = None

    def __str__(self) -> str:
        span = f" (span {self.span_id})" if self.span_id else ""
        return f"{self.path} row {self.index}{span}: {self.reason}"


@dataclass
class IngestReport:
    files: int = 0
    rows: int = 0  # rows read, those of files that broke off included
    sessions: list[str] = field(default_factory=list)  # written by this call
    merged: list[str] = field(default_factory=list)  # of those, stored sessions that grew by new rows
    replaced: list[str] = field(default_factory=list)  # stored sessions deleted to be built anew
    unchanged: list[str] = field(default_factory=list)  # already stored with these same rows
    spans: int = 0  # span nodes written by this call
    placed: int = 0  # rows that are in the graph after the call
    problems: list[RowProblem] = field(default_factory=list)  # rows not placed (the first MAX_LISTED)
    problem_count: int = 0
    notices: list[RowProblem] = field(default_factory=list)  # rows placed with a caveat
    notice_count: int = 0
    file_errors: list[str] = field(default_factory=list)
    file_notices: list[str] = field(default_factory=list)  # repairs made while reading a file
    broken_rows: int = 0  # rows of the files that broke off
    counts: Counter = field(default_factory=Counter)

    @property
    def ingested(self) -> int:
        """Sessions of the call that are in the graph as its rows say."""
        return len(self.sessions) + len(self.unchanged)

    def nothing_ingested_reason(self) -> str:
        if self.rows == 0 and not self.file_errors:
            return "the files hold no span rows"
        reasons = Counter(_kind_of(p.reason) for p in self.problems)
        parts = [f"{n} row(s): {kind}" for kind, n in reasons.most_common(3)]
        if self.file_errors:
            parts.insert(0, f"{len(self.file_errors)} file(s) broke off or are not span exports")
        return "; ".join(parts) or "no row could be placed"
