"""The metric reference, `docs/metric-reference.md`, written from the definitions.

    python -m mce_dagster.catalog.reference > docs/metric-reference.md

Every metric of `metric_defs/` and of the providers this package ships (DeepEval,
Ragas, Opik), with what its definition says: kind, scopes, unit, range, version,
what it depends on and reads from the graph, the cuts a query may use, its
description and caveats, a judge's input and rubric, and the scopes the shipped
`mce_config.yaml` enables. A plugin installed from another package is left out,
so the page is the same wherever it is written. `tests/test_docs.py` fails when
the checked-in page is not what this prints.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from ..core.ontology import Scope
from .loader import load_catalog
from .models import NATIVE_PROVIDER, Catalog, MetricDefinition
from .plugins import Plugin, discovered_plugins

COMMAND = "python -m mce_dagster.catalog.reference > docs/metric-reference.md"
# The providers of this package, as their entry points name them.
SHIPPED_PREFIX = "mce_dagster."
KIND_TITLES = {"deterministic": "Deterministic", "aggregate": "Aggregates", "llm_judge": "Judged by an LLM"}
PROVIDER_TITLES = {NATIVE_PROVIDER: "Native", "deepeval": "DeepEval", "ragas": "Ragas", "opik": "Opik"}


def shipped_plugins() -> list[Plugin]:
    """The providers this package registers (its own entry points), not other packages'."""
    return [plugin for plugin, where in discovered_plugins() if f"= {SHIPPED_PREFIX}" in where]


def enabled_by_default(catalog: Catalog) -> dict[tuple[str, str], list[Scope]]:
    """(provider, name) -> the scopes the shipped mce_config.yaml evaluates it at,
    dependencies included, in the order its definition lists them."""
    from ..config import DEFAULT_CONFIG_PATH, load_config

    on = {(m.definition.key, m.scope) for m in load_config(catalog, DEFAULT_CONFIG_PATH).enabled}
    return {d.key: [s for s in d.scopes if (d.key, s) in on] for d in catalog.definitions.values()}


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _range(definition: MetricDefinition) -> str:
    lo, hi = definition.value_range
    show = lambda v, inf: inf if v is None else f"{v:g}"  # noqa: E731
    return f"[{show(lo, '-∞')}, {show(hi, '∞')}]"


def _scopes(scopes: Iterable[Scope]) -> str:
    return ", ".join(s.value for s in scopes)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _definition(d: MetricDefinition, enabled: list[Scope]) -> list[str]:
    lines = [f"#### `{d.ref.qualified_name}`", ""]
    facts = [
        f"{d.kind.replace('_', ' ')}",
        f"scopes {_scopes(d.scopes)}",
        f"unit {d.unit}",
        f"range {_range(d)}",
        f"version {d.version}",
    ]
    lines.append("; ".join(facts) + ".")
    lines.append(f"On by default at: {_scopes(enabled)}." if enabled else "Off by default: ask for it by name (`mce compute --metrics`).")
    lines += ["", _one_line(d.description)]
    if d.caveats:
        lines += ["", f"*Caveats.* {_one_line(d.caveats)}"]
    details = []
    if d.depends_on:
        details.append(f"- depends on: {', '.join(f'`{r}`' for r in d.depends_on)}")
    if d.aggregate is not None:
        details.append(f"- aggregate: `{d.aggregate.function}` of `{d.aggregate.of}`")
    if d.requires:
        reads = "; ".join(f"{label.value}: {', '.join(f'`{p}`' for p in props)}" for label, props in d.requires.items())
        details.append(f"- reads: {reads}")
    if d.cuts:
        details.append(f"- cuts a query may use: {', '.join(d.cuts)}")
    if d.judge is not None:
        details.append(f"- judge input: `{d.judge.input}`")
        details.append(f"- rubric: {_one_line(d.judge.rubric)}")
    if details:
        lines += [""] + details
    return lines + [""]


def render(catalog: Catalog | None = None) -> str:
    """The whole page, as Markdown."""
    catalog = catalog or load_catalog(plugins=shipped_plugins())
    enabled = enabled_by_default(catalog)
    definitions = sorted(catalog.definitions.values(), key=lambda d: (d.provider != NATIVE_PROVIDER, d.provider, d.name))
    lines = [
        "# Metric reference",
        "",
        f"<!-- Written by `{COMMAND}` from metric_defs/ and the",
        "     providers' definitions: edit those, not this page (tests/test_docs.py checks it is current). -->",
        "",
        f"{len(definitions)} metrics, {len(catalog.metrics)} (metric, scope) pairs: one Dagster asset each. "
        "What the fields mean, and how a metric is added, is in [metrics.md](metrics.md).",
        "",
        "| metric | provider | kind | scopes | unit | range | version | on by default at |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in definitions:
        row = (
            f"[`{d.ref.qualified_name}`](#{d.ref.qualified_name.replace('.', '').lower()})",
            d.provider,
            d.kind,
            _scopes(d.scopes),
            d.unit,
            _range(d),
            str(d.version),
            _scopes(enabled.get(d.key, [])) or "-",
        )
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    lines.append("")
    for provider in sorted({d.provider for d in definitions}, key=lambda p: (p != NATIVE_PROVIDER, p)):
        lines += [f"## {PROVIDER_TITLES.get(provider, provider)}", ""]
        own = [d for d in definitions if d.provider == provider]
        for kind in ("deterministic", "aggregate", "llm_judge"):
            of_kind = [d for d in own if d.kind == kind]
            if not of_kind:
                continue
            lines += [f"### {KIND_TITLES[kind]}", ""]
            for d in of_kind:
                lines += _definition(d, enabled.get(d.key, []))
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
