"""The documentation against the code: every command and option of the CLI is in the user's
guide and the guide names none the CLI lacks; every advice id has its entry in the advice
catalogue; every benchmark script is on the benchmarks page; every link between the pages
resolves; and nothing in the repository refers to notes outside it.

When a command or option is added: add a row for it to its command's table in
docs/guide.md (`| `--name VALUE`, `-n` | what it does |`)."""

import re
from pathlib import Path

import pytest
import typer

from paddletune.advisors import gpu
from paddletune.cli import app

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
GUIDE = DOCS / "guide.md"
CATALOGUE = DOCS / "advice.md"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
WRITTEN_ELSEWHERE = {DOCS / "reliability.md"}  # linked to, written separately
GROUP = typer.main.get_command(app)


# --- the guide and the CLI ---------------------------------------------------------------------
def guide_sections():
    """{command name ('' for the global options): the names the guide's table gives it}: the
    options (`--out`, `-o`) and arguments (`SCRIPT`) in the first cell of each table row,
    under the heading ## `paddletune NAME`."""
    sections, current = {}, None
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `paddletune ?([a-z]*)`$", line)
        if heading:
            current = sections.setdefault(heading.group(1), set())
        elif line.startswith("## "):
            current = None
        elif current is not None and line.startswith("| `"):
            first_cell = line.split("|")[1]
            current.update(re.findall(r"`(--?[a-z][a-z-]*|[A-Z]+)[` ]", first_cell))
    return sections


def cli_names(command):
    """The option names (long and short) and argument metavars of a command (the group's
    own options for None)."""
    cmd = GROUP if command is None else GROUP.commands[command]
    names = {"--help"}
    for param in cmd.params:
        if param.param_type_name == "argument":
            names.add(param.metavar)
        else:
            names.update(param.opts)
    return names


def test_the_guide_documents_every_command():
    assert set(guide_sections()) == {"", *GROUP.commands}


@pytest.mark.parametrize("command", sorted(GROUP.commands))
def test_the_guide_documents_every_option_and_no_other(command):
    documented = guide_sections()[command]
    cli = cli_names(command)
    assert sorted(cli - documented) == [], f"add these to the {command} table in docs/guide.md"
    assert sorted(documented - cli) == [], f"docs/guide.md names these; {command} has none"


def test_the_guide_documents_the_global_options():
    assert guide_sections()[""] == cli_names(None)


# --- the advice catalogue ----------------------------------------------------------------------
def advice_ids():
    """Every advice id the rules can return: the `id="..."` in paddletune/advisors/, and the
    ids of the GPU math flags' table."""
    ids = {"advisor-error"}
    for path in (REPO / "paddletune" / "advisors").glob("*.py"):
        ids.update(re.findall(r'\bid="([a-z0-9-]+)"', path.read_text(encoding="utf-8")))
    ids.update(row[3] for row in gpu.MATH_FLAGS)
    return ids


def catalogue_entries():
    return set(re.findall(r"^### ([a-z0-9-]+)$", CATALOGUE.read_text(encoding="utf-8"), re.M))


def test_every_advice_id_has_its_entry_in_the_catalogue():
    ids = advice_ids()
    assert len(ids) > 20, "few advice ids found: is the pattern still right?"
    assert sorted(ids - catalogue_entries()) == []


def test_the_catalogue_has_no_entry_for_an_id_no_rule_returns():
    assert sorted(catalogue_entries() - advice_ids()) == []


def test_an_advice_card_links_to_the_entry_of_its_id():
    from paddletune.render.advice import catalogue_link
    for advice_id in advice_ids():
        page, anchor = catalogue_link(advice_id).split("#")
        assert (REPO / page) == CATALOGUE and anchor in anchors(CATALOGUE)


# --- the benchmarks page -----------------------------------------------------------------------
def test_every_benchmark_script_is_on_the_benchmarks_page():
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted((REPO / "benchmarks").glob("*.py")) if p.name not in text]
    assert missing == []


# --- links -------------------------------------------------------------------------------------
def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and
    underscores kept), spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page):
    found, seen = set(), {}
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"#{1,6} (.+)", line) if not in_code else None
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page):
    """(target, anchor) of each relative markdown link on `page` (code blocks left out)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        yield (page.parent / path).resolve() if path else page, anchor


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_between_the_pages_resolve(page):
    for target, anchor in links(page):
        assert target.is_relative_to(REPO), target
        if target in WRITTEN_ELSEWHERE and not target.exists():
            continue
        assert target.exists(), f"{page.name} links to {target}, which is not there"
        if anchor and target.suffix == ".md":
            assert anchor in anchors(target), f"{page.name}: no #{anchor} in {target.name}"


# --- the README ----------------------------------------------------------------------------------
def test_the_readme_is_a_front_page_with_the_two_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    lines = text.splitlines()
    assert "pip install -e '.[test]' && python -m pytest" in lines  # what .ci/run runs
    first = next(line for line in lines if line.startswith("pip install . && "))
    assert first.endswith("&& paddletune advise")


# --- nothing outside the repository ------------------------------------------------------------
OUTSIDE = ["../" + "shared", "ADVICE" + ".md", "DESIGN" + ".md", "RELIABILITY" + ".md",
           "FLUID_REFERENCE" + ".md"]  # notes that live beside the repository, not in it


def test_nothing_refers_to_notes_outside_the_repository():
    found = []
    for folder in ("paddletune", "runtime", "tests", "docs", "examples", "benchmarks", ".ci"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in (".py", ".md", ".toml", "") or not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            found += [f"{path.relative_to(REPO)}: {word}" for word in OUTSIDE if word in text]
    for path in (REPO / "README.md", REPO / "pyproject.toml"):
        text = path.read_text(encoding="utf-8")
        found += [f"{path.name}: {word}" for word in OUTSIDE if word in text]
    assert found == []
