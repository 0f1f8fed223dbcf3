"""The native deterministic metrics: pure functions of a session context."""

from . import aggregates, counts, interactions, population, timing, usage  # noqa: F401
