"""The judge's record/replay cache: one SQLite file (WAL), safe with concurrent
writers in one process or many (each write is one autocommitted statement, and a
writer waits for the lock instead of failing).

The key covers everything that changes an answer: the model and its endpoint,
every message, the temperature, the log-probability flag and depth, the reply's
token limit, the sample index. An entry keeps the text, the log-probabilities and the usage, so a
replayed run reports the same tokens and cost as the recorded one.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.judging import JudgeReply, TokenLogprob
from ..files import private_file

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT NOT NULL, reply TEXT NOT NULL, recorded_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS models (model TEXT PRIMARY KEY, logprobs_rejected TEXT)",
)


def cache_key(params: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def reply_to_json(reply: JudgeReply) -> str:
    return json.dumps(
        {
            "text": reply.text,
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "logprobs": None
            if reply.logprobs is None
            else [[t.token, t.logprob, [list(p) for p in t.top]] for t in reply.logprobs],
        },
        ensure_ascii=False,
    )


def reply_from_json(text: str) -> JudgeReply:
    data = json.loads(text)
    logprobs = data.get("logprobs")
    return JudgeReply(
        text=data["text"],
        prompt_tokens=int(data.get("prompt_tokens") or 0),
        completion_tokens=int(data.get("completion_tokens") or 0),
        logprobs=None
        if logprobs is None
        else tuple(TokenLogprob(t, float(lp), tuple((a, float(b)) for a, b in top)) for t, lp, top in logprobs),
        cached=True,
    )


class ReplyCache:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The replies quote the sessions' text; SQLite gives its -wal and -shm files
        # the database file's mode.
        private_file(self.path)
        self._local = threading.local()
        self._set_up(deadline=time.monotonic() + 60.0)

    def _set_up(self, deadline: float) -> None:
        # Switching to WAL needs an exclusive lock, and SQLite answers "database is locked" at
        # once (no busy handler) when two processes open a new cache together: retry until
        # the deadline rather than fail a judge run over a lock held for milliseconds.
        db = self._connect()
        delay = 0.01
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                for statement in _SCHEMA:
                    db.execute(statement)
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            db.execute("PRAGMA busy_timeout=60000")
            self._local.db = db
        return db

    def get(self, key: str) -> JudgeReply | None:
        row = self._connect().execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        return reply_from_json(row[0]) if row else None

    def put(self, key: str, model: str, reply: JudgeReply) -> None:
        self._connect().execute(
            "INSERT OR REPLACE INTO replies (key, model, reply, recorded_at) VALUES (?, ?, ?, ?)",
            (key, model, reply_to_json(reply), time.time()),
        )

    def logprobs_rejected(self, model: str) -> str | None:
        row = self._connect().execute("SELECT logprobs_rejected FROM models WHERE model = ?", (model,)).fetchone()
        return row[0] if row else None

    def record_logprobs_rejected(self, model: str, reason: str) -> None:
        self._connect().execute(
            "INSERT OR REPLACE INTO models (model, logprobs_rejected) VALUES (?, ?)", (model, reason)
        )

    def __len__(self) -> int:
        return int(self._connect().execute("SELECT count(*) FROM replies").fetchone()[0])
