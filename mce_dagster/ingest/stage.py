"""The on-disk stage of one ingest call: every parsed row of every file, keyed by
session, in a temporary SQLite database.

Files are read once, row by row, into the stage; sessions are then read back a
batch at a time. So memory holds one batch, never a file, and the rules that need
the whole call (a file that breaks off, a span id two sessions claim) are queries.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .spans import ParsedSpan, carriable

_SCHEMA = """
CREATE TABLE files (no INTEGER PRIMARY KEY, path TEXT NOT NULL, error TEXT, rows INTEGER NOT NULL DEFAULT 0);
CREATE TABLE rows (
    seq INTEGER PRIMARY KEY, file INTEGER NOT NULL, idx INTEGER NOT NULL, session TEXT NOT NULL,
    span TEXT NOT NULL, digest TEXT NOT NULL, size INTEGER NOT NULL, data BLOB NOT NULL, problem TEXT
);
-- Rows that are not placed (placed = 0), or placed with a caveat (placed = 1).
CREATE TABLE problems (
    file INTEGER NOT NULL, idx INTEGER NOT NULL, span TEXT, reason TEXT NOT NULL, placed INTEGER NOT NULL, session TEXT,
    digest TEXT  -- of the row, when it could be read as JSON
);
CREATE TABLE broken (session TEXT PRIMARY KEY, file INTEGER NOT NULL);
"""


def _text(value: str) -> str:
    """Text SQLite takes and a terminal shows: NUL and unpaired surrogates escaped."""
    return carriable(value)[0]


@dataclass(frozen=True)
class StagedRow:
    seq: int
    file: int
    index: int
    session: str
    span_id: str
    digest: str
    data: bytes

    def span(self) -> ParsedSpan:
        return pickle.loads(self.data)


class Stage:
    def __init__(self, directory: Path):
        self.db = sqlite3.connect(Path(directory) / "stage.sqlite", isolation_level=None)
        # A scratch database: no journal, no fsync, a bounded page cache.
        self.db.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-8192; PRAGMA temp_store=FILE;" + _SCHEMA
        )
        self.paths: dict[int, str] = {}
        self._pending = 0
        self.db.execute("BEGIN")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Stage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tick(self) -> None:
        self._pending += 1
        if self._pending >= 5000:
            self.db.execute("COMMIT")
            self.db.execute("BEGIN")
            self._pending = 0

    def add_file(self, path: Path) -> int:
        shown = _text(str(path))
        cur = self.db.execute("INSERT INTO files (path) VALUES (?)", (shown,))
        self.paths[cur.lastrowid] = shown
        return cur.lastrowid

    def add_row(self, file: int, index: int, span: ParsedSpan, digest: str) -> None:
        data = pickle.dumps(span, protocol=pickle.HIGHEST_PROTOCOL)
        self.db.execute(
            "INSERT INTO rows (file, idx, session, span, digest, size, data) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (file, index, span.session_id, span.span_id, digest, len(data), data),
        )
        self._tick()

    def add_problem(
        self,
        file: int,
        index: int,
        span_id: str | None,
        reason: str,
        placed: bool = False,
        session: str | None = None,
        digest: str | None = None,
    ) -> None:
        self.db.execute(
            "INSERT INTO problems (file, idx, span, reason, placed, session, digest) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (file, index, None if span_id is None else _text(span_id), _text(reason), int(placed), session, digest),
        )
        self._tick()

    def file_done(self, file: int, rows: int) -> None:
        self.db.execute("UPDATE files SET rows = ? WHERE no = ?", (rows, file))

    def drop_file(self, file: int, rows: int, error: str) -> list[str]:
        """Forget what a file that broke off staged; the sessions it had rows of
        are not ingested from any file of the call. Returns those sessions."""
        sessions = [r[0] for r in self.db.execute("SELECT DISTINCT session FROM rows WHERE file = ? ORDER BY session", (file,))]
        self.db.executemany("INSERT OR IGNORE INTO broken (session, file) VALUES (?, ?)", [(s, file) for s in sessions])
        self.db.execute("DELETE FROM rows WHERE file = ?", (file,))
        self.db.execute("DELETE FROM problems WHERE file = ?", (file,))
        self.db.execute("UPDATE files SET error = ?, rows = ? WHERE no = ?", (_text(error), rows, file))
        return sessions

    def finish(self) -> None:
        """Indexes, then the rules over the whole call: sessions a broken file had
        rows of, and span ids claimed by two sessions (the first row's wins)."""
        self.db.execute("COMMIT")
        self.db.execute("BEGIN")
        self.db.execute("CREATE INDEX rows_session ON rows (session, seq)")
        self.db.execute("CREATE INDEX rows_span ON rows (span, seq)")
        self.db.execute(
            """UPDATE rows SET problem = printf(
                   'session %s also has rows in %s, which breaks off; none of its rows are ingested, so that it is not stored incomplete',
                   quote(rows.session), f.path)
               FROM broken b JOIN files f ON f.no = b.file
               WHERE rows.session = b.session"""
        )
        self.db.execute(
            """UPDATE rows SET problem = printf(
                   'SpanId %s already belongs to session %s (row %d of %s): a span belongs to one session, so this row is not ingested',
                   quote(rows.span), quote(o.session), o.idx, f.path)
               FROM (SELECT r.span, r.session, r.idx, r.file FROM rows r
                     JOIN (SELECT span, MIN(seq) AS seq FROM rows WHERE problem IS NULL GROUP BY span) m ON r.seq = m.seq) o
               JOIN files f ON f.no = o.file
               WHERE rows.span = o.span AND rows.session <> o.session AND rows.problem IS NULL"""
        )
        self.db.execute("COMMIT")
        self.db.execute("BEGIN")

    def claimed_by_other(self, span_id: str, session: str) -> bool:
        """A row of another session of this call will be written with this span id."""
        return (
            self.db.execute(
                "SELECT 1 FROM rows WHERE span = ? AND session <> ? AND problem IS NULL LIMIT 1", (span_id, session)
            ).fetchone()
            is not None
        )

    def batches(self, max_sessions: int, max_bytes: int) -> Iterator[list[tuple[str, list[StagedRow]]]]:
        """Sessions in id order, grouped so that a batch holds at most `max_sessions`
        sessions and `max_bytes` of staged rows (a larger session is a batch alone)."""
        batch: list[str] = []
        total = 0
        for session, size in self._session_sizes():
            if batch and (len(batch) >= max_sessions or total + size > max_bytes):
                yield self._load(batch)
                batch, total = [], 0
            batch.append(session)
            total += size
        if batch:
            yield self._load(batch)

    def session_pages(self, size: int = 1000) -> Iterator[list[str]]:
        """The sessions that have rows to place, a page at a time."""
        page: list[str] = []
        for session, _ in self._session_sizes():
            page.append(session)
            if len(page) >= size:
                yield page
                page = []
        if page:
            yield page

    def _session_sizes(self) -> Iterator[tuple[str, int]]:
        # Pages of sessions, so that no query stays open while the caller writes.
        after = ""  # session ids are never empty
        while True:
            page = self.db.execute(
                "SELECT session, SUM(size) FROM rows WHERE problem IS NULL AND session > ? "
                "GROUP BY session ORDER BY session LIMIT 1000",
                (after,),
            ).fetchall()
            if not page:
                return
            yield from page
            after = page[-1][0]

    def _load(self, sessions: list[str]) -> list[tuple[str, list[StagedRow]]]:
        marks = ",".join("?" * len(sessions))
        out: dict[str, list[StagedRow]] = {s: [] for s in sessions}
        for seq, file, idx, session, span, digest, data in self.db.execute(
            f"SELECT seq, file, idx, session, span, digest, data FROM rows "
            f"WHERE problem IS NULL AND session IN ({marks}) ORDER BY session, seq",
            sessions,
        ):
            out[session].append(StagedRow(seq, file, idx, session, span, digest, data))
        return list(out.items())

    def unplaced_keys(self, sessions: list[str]) -> dict[str, set[str]]:
        """The rows of these sessions that are not placed (so far), by session, each
        as a key: the row's digest, or its file and index when it is not JSON one
        can digest. What the graph keeps on each Session, since its span nodes
        cannot show it; the same row sent twice is one key."""
        if not sessions:
            return {}
        marks = ",".join("?" * len(sessions))
        query = (
            f"SELECT p.session, coalesce(p.digest, f.path || '#' || p.idx) FROM problems p JOIN files f ON f.no = p.file "
            f"WHERE p.placed = 0 AND p.session IN ({marks}) "
            f"UNION SELECT session, digest FROM rows WHERE problem IS NOT NULL AND session IN ({marks})"
        )
        out: dict[str, set[str]] = {}
        for session, key in self.db.execute(query, [*sessions, *sessions]):
            out.setdefault(session, set()).add(key)
        return out

    # -- what the report lists ------------------------------------------------

    def _problem_rows(self, placed: bool) -> str:
        if placed:
            return "SELECT file, idx, span, reason FROM problems WHERE placed = 1"
        return (
            "SELECT file, idx, span, reason FROM problems WHERE placed = 0 "
            "UNION ALL SELECT file, idx, span, problem FROM rows WHERE problem IS NOT NULL"
        )

    def problem_count(self, placed: bool = False) -> int:
        return self.db.execute(f"SELECT count(*) FROM ({self._problem_rows(placed)})").fetchone()[0]

    def problems(self, placed: bool = False, limit: int | None = None) -> Iterator[tuple[str, int, str | None, str]]:
        query = f"SELECT file, idx, span, reason FROM ({self._problem_rows(placed)}) ORDER BY file, idx"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        for file, idx, span, reason in self.db.execute(query):
            yield self.paths[file], idx, span, reason

    def file_errors(self) -> list[tuple[str, int, str]]:
        return [(p, n, e) for p, n, e in self.db.execute("SELECT path, rows, error FROM files WHERE error IS NOT NULL ORDER BY no")]
