"""Whether a sentence may be sent: every number in it is checked against the result
it came from. Pure: a stored answer (`query.query_metric`) and the text in, a report
out.

Two rules do the work. A number in a sentence that names a session, agent, app,
model, tool or period is checked against that entry of the result only: membership
in the result as a whole accepts a real number attached to the wrong entry every
time. And a number is compared at the precision it is written with (12.3 may stand
for a stored 12.34, 12.5 may not), a percentage against a stored fraction, thousands
separators read as such. Meaning is not checked: "the error rate fell" beside a
correct, rising number passes, and the report says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

NOTE = (
    "Checks numbers only: each one against the result's entries (the entries the sentence names, "
    "when it names any). It does not judge meaning: a correct number beside a wrong word "
    "(rose for fell, best for worst) passes."
)
DIMENSIONS = ("session", "agent", "app", "model", "tool")
PERIODS = ("day", "month")

# A number, with thousands separators and a decimal part; `%` or `percent` after it.
# No lookahead for `.`: a number that ends a sentence is followed by one.
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?!\d)(\s?%|\s?percent\b|\s?per cent\b)?", re.IGNORECASE)
_DATE = re.compile(r"(?<![\w-])(\d{4})-(\d{2})(?:-(\d{2}))?(?:T[\d:.]+Z?)?(?![\w-])")
# "session s-042", "session 7f3a...": an id after the word, with a digit in it.
_SESSION_WORD = re.compile(r"\bsession\s+[\"'`]?([A-Za-z0-9][\w.:-]*[A-Za-z0-9]|\d)[\"'`]?", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")


@dataclass
class Mention:
    kind: str  # a dimension or a period kind
    value: str


@dataclass
class Sentence:
    text: str
    mentions: list[Mention] = field(default_factory=list)
    numbers: list[tuple[str, float, int, bool]] = field(default_factory=list)  # text, value, decimals, percent


def _name_pattern(name: str) -> re.Pattern[str]:
    variants = {re.escape(name), re.escape(name.replace("_", " ")), re.escape(name.replace("_", "-"))}
    return re.compile(r"(?<![\w-])(?:" + "|".join(sorted(variants, key=len, reverse=True)) + r")(?![\w-])", re.IGNORECASE)


def _vocabulary(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, name) of every name the text may tie a number to, longest first."""
    names: set[tuple[str, str]] = set()
    for kind, values in (result.get("vocabulary") or {}).items():
        names.update((kind, str(v)) for v in values)
    for row in result.get("rows", ()):
        for kind in DIMENSIONS:
            if row.get(kind) is not None:
                names.add((kind, str(row[kind])))
    for kind, key in (("session", "session_id"), ("app", "app"), ("agent", "agent")):
        value = (result.get("filters") or {}).get(key)
        if value is not None:
            names.add((kind, str(value)))
    return sorted(names, key=lambda kn: (-len(kn[1]), kn))


def _mask(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def read_sentence(text: str, vocabulary: list[tuple[str, str]]) -> Sentence:
    """The names, periods and numbers of one sentence; names and dates are masked
    before numbers are read, so the digits of gpt-4o or 2025-03-04 are no claim."""
    sentence = Sentence(text)
    work = text
    for kind, name in vocabulary:
        for m in _name_pattern(name).finditer(work):
            sentence.mentions.append(Mention(kind, name))
            work = _mask(work, m.start(), m.end())
    for m in _SESSION_WORD.finditer(work):
        token = m.group(1)
        if any(c.isdigit() for c in token):
            sentence.mentions.append(Mention("session", token))
            work = _mask(work, m.start(1), m.end(1))
    for m in _DATE.finditer(work):
        year, month, day = m.group(1), m.group(2), m.group(3)
        if 1 <= int(month) <= 12:
            sentence.mentions.append(Mention("day", f"{year}-{month}-{day}") if day else Mention("month", f"{year}-{month}"))
            work = _mask(work, m.start(), m.end())
    for m in _NUMBER.finditer(work):
        whole, decimals, percent = m.group(1), m.group(2) or "", m.group(3)
        value = float(whole.replace(",", "") + decimals)
        sentence.numbers.append((m.group(0).strip(), value, max(len(decimals) - 1, 0), bool(percent)))
    return sentence


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


# -- matching --------------------------------------------------------------------------


def _fields(row: dict[str, Any]) -> list[tuple[str, float]]:
    return [(k, float(row[k])) for k in ("value", "numerator", "denominator", "count") if isinstance(row.get(k), (int, float))]


def number_matches(written: float, decimals: int, percent: bool, stored: float) -> bool:
    """At the precision written: 12.3 stands for [12.25, 12.35]; 23.8% for a stored
    0.238 (to 0.2375 .. 0.2385); 1,234 for 1233.5 .. 1234.5."""
    tolerance = 0.5 * 10 ** (-decimals) + 1e-9 * max(1.0, abs(written))
    candidate = stored * 100.0 if percent else stored
    return abs(candidate - written) <= tolerance


def _period_range(kind: str, value: str) -> tuple[datetime, datetime]:
    if kind == "day":
        start = datetime.fromisoformat(value).replace(tzinfo=timezone.utc)
        return start, start + timedelta(days=1)
    year, month = (int(p) for p in value.split("-"))
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)


def _window(result: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    w = result.get("window") or {}

    def parse(v: str | None) -> datetime | None:
        return datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None

    return parse(w.get("since")), parse(w.get("until"))


def scoped_rows(result: dict[str, Any], mentions: list[Mention]) -> tuple[list[dict[str, Any]], str | None]:
    """The entries of the result a sentence's names point at, and why none, if none.
    Within a kind, any named value; across kinds, all of them."""
    rows = list(result.get("rows", ()))
    by = result.get("by")
    filters = result.get("filters") or {}
    fixed = {"session": filters.get("session_id"), "app": filters.get("app"), "agent": filters.get("agent")}
    named: dict[str, set[str]] = {}
    for m in mentions:
        named.setdefault(m.kind, set()).add(m.value)
    for kind, values in named.items():
        lowered = {v.lower() for v in values}
        if kind in DIMENSIONS:
            if by == kind:
                rows = [r for r in rows if str(r.get(kind)).lower() in lowered]
                if not rows:
                    return [], f"the result has no entry for {kind} {', '.join(sorted(values))}"
            elif fixed.get(kind) is not None:
                if str(fixed[kind]).lower() not in lowered:
                    return [], f"the result is for {kind} {fixed[kind]} only, the sentence names {', '.join(sorted(values))}"
            else:
                return [], f"the result is not cut or filtered by {kind}, so it holds no value for {kind} {', '.join(sorted(values))}"
        else:  # a period
            if by in PERIODS:
                keep = []
                for r in rows:
                    key = str(r.get(by))
                    # a day row answers for its day and month; a month row only for its month
                    if any(key == v or (by == "day" and kind == "month" and key.startswith(v)) for v in values):
                        keep.append(r)
                if not keep:
                    return [], f"the result has no entry for {kind} {', '.join(sorted(values))} (it is cut by {by})"
                rows = keep
                continue
            since, until = _window(result)
            if since is None and until is None:
                return [], f"the result is over all evaluated sessions, not for {kind} {', '.join(sorted(values))}"
            for v in values:
                start, end = _period_range(kind, v)
                inside = (since is None or start >= since) and (until is None or end <= until + timedelta(days=1))
                if not inside:
                    return [], f"{kind} {v} lies outside the result's window ({since and since.date()} to {until and until.date()})"
    return rows, None


def _describe(row: dict[str, Any], by: str | None) -> str:
    return f"{by} {row.get(by)}" if by else "the result"


def verify(result: dict[str, Any], text: str, scoped: bool = True) -> dict[str, Any]:
    """Every number of `text` checked against `result`: `scoped` checks a number
    against the entries its sentence names; without it, against the whole result
    (membership, the weaker check the eval compares against)."""
    vocabulary = _vocabulary(result)
    by = result.get("by")
    all_rows = list(result.get("rows", ()))
    checked = []
    for sentence_text in split_sentences(text):
        sentence = read_sentence(sentence_text, vocabulary)
        if scoped:
            rows, why_none = scoped_rows(result, sentence.mentions)
        else:
            rows, why_none = all_rows, None
        scope: dict[str, list[str]] = {}
        for m in sentence.mentions:
            scope.setdefault(m.kind, [])
            if m.value not in scope[m.kind]:
                scope[m.kind].append(m.value)
        for written, value, decimals, percent in sentence.numbers:
            entry: dict[str, Any] = {
                "text": written,
                "sentence": sentence_text,
                "value": value,
                "percent": percent,
                "decimals": decimals,
                "scope": scope if scoped else {},
                "entries_checked": len(rows),
            }
            hit = next(((r, f, s) for r in rows for f, s in _fields(r) if number_matches(value, decimals, percent, s)), None)
            if hit is not None:
                row, fname, stored = hit
                entry.update(passed=True, matched={"entry": _describe(row, by), "field": fname, "stored": stored}, reason=None)
            else:
                elsewhere = [
                    _describe(r, by) for r in all_rows if any(number_matches(value, decimals, percent, s) for _, s in _fields(r))
                ]
                if why_none:
                    reason = why_none
                elif elsewhere:
                    reason = f"not the value of the entries named ({', '.join(f'{k} {', '.join(v)}' for k, v in scope.items())}); it is that of {', '.join(elsewhere[:3])}"
                else:
                    reason = "no entry of the result holds this number at the precision written"
                entry.update(passed=False, matched=None, reason=reason)
            checked.append(entry)
    return {
        "result_id": result.get("result_id"),
        "passed": all(c["passed"] for c in checked),
        "mode": "scoped" if scoped else "membership",
        "numbers": checked,
        "checked": len(checked),
        "failed": sum(not c["passed"] for c in checked),
        "note": NOTE if checked else NOTE + " The text holds no number, so there was nothing to check.",
    }
