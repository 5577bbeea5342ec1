"""The README stays a landing page and the docs site's structure stays whole (`make test` builds the site itself).

Checked here, fast and without mkdocs: the README's length, the two commands on its first screen, that its relative
links (and their anchors) resolve; that every page of mkdocs.yml's nav exists or is generated; that every measured
table in benchmarks/README.md names its command, date, commit and load; that package docstrings stay short.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _docs_gen():
    """tools/docs_gen.py, the mkdocs hook that generates the reference pages (loaded by path: tools/ is not installed)."""
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "tools" / "docs_gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DOCS_GEN = _docs_gen()
GENERATED_PAGES = DOCS_GEN.GENERATED_PAGES
README = ROOT / "README.md"
MAX_README_LINES = 250
FIRST_SCREEN = 25  # lines
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor GitHub and mkdocs' toc give a heading (lowercase, punctuation dropped, spaces to dashes)."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"\s", "-", text.strip())


def _anchors(md: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+)$", text, flags=re.M)}


def _relative_links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_slug_matches_the_anchor_rule_on_hand_checked_headings():
    assert _slug("The toy world's four effects") == "the-toy-worlds-four-effects"
    assert _slug("Labelling's shared work (`run_many`)") == "labellings-shared-work-run_many"
    assert _slug("GPU users: bring your own CUDA torch") == "gpu-users-bring-your-own-cuda-torch"


def test_readme_is_a_landing_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail into docs/ pages"


def test_readme_shows_the_two_fresh_machine_commands_on_its_first_screen():
    screen = README.read_text().splitlines()[:FIRST_SCREEN]
    fence = [i for i, line in enumerate(screen) if line.startswith("```")]
    assert len(fence) >= 2, "no code block on the README's first screen"
    block = [line.split("#")[0].strip() for line in screen[fence[0] + 1:fence[1]]]
    assert [c for c in block if c] == ["make demo", "make test"]


@pytest.mark.parametrize("md", [README, ROOT / "benchmarks" / "README.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_to_files_and_headings(md: Path):
    broken = []
    for target in _relative_links(md):
        path, _, anchor = target.partition("#")
        file = (md.parent / path).resolve() if path else md
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{md.name}: broken links {broken}"


def test_every_nav_page_exists_and_every_page_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = ROOT / config.get("docs_dir", "docs")

    def pages(nav):
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from (pages(value) if isinstance(value, list) else [value])

    nav = list(pages(config["nav"]))
    missing = [p for p in nav if not (docs / p).is_file() and p not in GENERATED_PAGES]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    on_disk = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    assert on_disk - set(nav) == set(), "pages in docs/ that no nav entry reaches"
    assert set(GENERATED_PAGES) <= set(nav), "a generated reference page is missing from the nav"


def test_cli_reference_is_generated_from_every_commands_parser():
    from routedvlm.cli import COMMANDS

    page = DOCS_GEN.cli_markdown()
    for name in COMMANDS:
        assert re.search(rf"^## routedvlm {name}\b", page, flags=re.M), f"no section for `routedvlm {name}`"
    # nested commands (a subparser, and a second parser the command dispatches to) and real flags come through
    assert "### routedvlm labels validate" in page and "### routedvlm label merge" in page
    assert "usage: train-router" in page and "--target-accuracy" in page and "usage: routedvlm serve" in page


def test_every_benchmark_table_names_its_command_date_commit_and_load():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    with_tables = [s for s in sections if re.search(r"^\|[-| ]+\|$", s, flags=re.M)]
    assert with_tables
    for section in with_tables:
        title = section.splitlines()[0]
        assert re.search(r"[Cc]ommands?\b", section), f"{title}: no command"
        assert re.search(r"\b[0-9a-f]{7}\b", section), f"{title}: no commit"
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", section), f"{title}: no date"
        assert re.search(r"\bload\b", section), f"{title}: no machine load"


def test_package_docstrings_leave_the_file_map_to_one_page():
    """The file-by-file map lives in docs/layout.md only: a package docstring says what the package is for."""
    folders = DOCS_GEN.package_dirs().values()
    assert folders
    maps = {}
    for init in sorted({ROOT / folder / "__init__.py" for folder in folders}):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        files = set(re.findall(r"\b\w+\.py\b", doc))
        if len(files) >= 3 or re.search(r"^(Files|Modules):", doc, flags=re.M):
            maps[str(init.relative_to(ROOT))] = sorted(files)
    assert not maps, f"package docstrings that list their files (link docs/layout.md instead): {maps}"
