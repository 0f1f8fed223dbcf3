"""The documentation stays true to the repository: the metric reference is what the
definitions say today, every Markdown table is well formed, every relative link
reaches a file, the README opens with its two commands, and no file cites a
document the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

from mce_dagster.catalog import load_catalog
from mce_dagster.catalog.reference import COMMAND, render, shipped_plugins

REFERENCE = REPO / "docs" / "metric-reference.md"
README = REPO / "README.md"
PAGES = [README, REPO / "bench" / "README.md", REPO / "deploy" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Where code and definitions live; none may point a reader at a document outside the repository.
SOURCES = ("mce_dagster", "metric_defs", "evals", "bench", "examples", "deploy", "services")
CITATION = re.compile(r"design 0\d|design/|\b0[1-6]-[a-z-]+\.md|\.\./seeds|seeds/", re.IGNORECASE)


def test_the_metric_reference_is_current():
    assert REFERENCE.read_text() == render(), f"docs/metric-reference.md is not current: run `{COMMAND}` (make docs)"


def test_the_reference_changes_with_a_definition():
    catalog = load_catalog(plugins=shipped_plugins())
    page = render(catalog)
    key = ("native", "ToolErrorRate")
    catalog.definitions[key] = catalog.definitions[key].model_copy(update={"description": "Changed for the test."})
    changed = render(catalog)
    assert changed != page and "Changed for the test." in changed
    # Every definition of the shipped providers is on the page, with its rubric if judged.
    for d in catalog.definitions.values():
        assert f"#### `{d.ref.qualified_name}`" in page
    assert {"## Native", "## DeepEval", "## Ragas", "## Opik"} <= set(page.splitlines())
    assert "5: the answer addresses exactly what was asked" in page  # AnswerRelevancy's rubric


def cells(row: str) -> int:
    """Cells of a Markdown table row; a `\\|` is a pipe inside a cell."""
    return len(re.split(r"(?<!\\)\|", row.strip().strip("|")))


def tables(text: str) -> list[list[str]]:
    """Each table outside code blocks: its header, delimiter and body rows."""
    found, current, fenced = [], [], False
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            current.append(line)
            continue
        if current:
            found.append(current)
            current = []
    return found


def test_the_table_checker_sees_a_broken_table():
    assert [cells(r) for r in tables("| a | b |\n|---|---|---|\n| 1 | 2 |\n")[0]] == [2, 3, 2]
    assert cells("| `a\\|b` | c |") == 2


def test_every_table_has_as_many_cells_as_its_header():
    for page in PAGES:
        for table in tables(page.read_text()):
            header, delimiter, *body = table
            assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", delimiter.strip()), f"{page.name}: no delimiter row under {header}"
            for row in [delimiter, *body]:
                assert cells(row) == cells(header), f"{page.name}: {cells(row)} cells, header has {cells(header)}:\n{header}\n{row}"


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_reaches_a_file_and_its_heading():
    assert "verifying-an-agents-numbers" in anchors(REPO / "bench" / "README.md")
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            assert path.exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"
            if anchor and path.suffix == ".md":
                assert anchor in anchors(path), f"{page.relative_to(REPO)} links to {target}: no such heading"


def test_the_readme_opens_with_the_two_commands_and_stays_short():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    assert [line.split("#")[0].strip() for line in first_block.splitlines()] == ["make demo", "make test"]
    assert len(text.splitlines()) <= 320, "the README is the first hour: move the rest to docs/"


def test_no_file_cites_a_document_the_repository_does_not_hold():
    cited = []
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ".md", ".sh", ".toml", ""}:
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if CITATION.search(line):
                        cited.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    for page in PAGES:
        cited += [f"{page.relative_to(REPO)}: {m.group(0)}" for m in CITATION.finditer(page.read_text())]
    assert not cited, "\n".join(cited)


def test_the_configuration_page_names_every_variable_the_settings_read():
    from mce_dagster.settings import VARIABLES

    page = (REPO / "docs" / "configuration.md").read_text()
    missing = [name for name, _, _ in VARIABLES if f"`{name}`" not in page]
    assert not missing, f"docs/configuration.md does not name {missing}"
