"""The manual's command examples stay runnable: every `routedvlm …` / `train-router …` line in a shell block of the
README or a docs/ page is parsed by that command's real argparse parser (captured as tools/docs_gen.py captures it
for the CLI reference, nothing runs), so a renamed or removed flag, a subcommand that no longer exists or a value
outside a flag's choices fails here instead of in a reader's terminal. Optional parts written `[--flag VALUE]` are
checked too; `...` stands for more of the same and is skipped. Links inside docs/ are checked by
`mkdocs build --strict` (make test); the README's by tests/test_docs.py; the pictures a page shows must exist.
"""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from tests.test_docs import DOCS_GEN, README, ROOT

SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", flags=re.S | re.M)
COMMAND_LINE = re.compile(r"^([A-Za-z_]\w*=\S*\s+)*(\S*/)?(routedvlm|train-router)(\s|$)")
PLACEHOLDER_VALUE = re.compile(r"invalid \w+ value: '[A-Z][A-Z0-9_]*'$")  # `--max-image-pixels N`
ENDS_COMMAND = {"|", "||", "&&", ";", "&", "2>&1"}
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _lines(block: str):
    """Logical lines of a shell block: continuations joined, comments (a `#` after a space) dropped."""
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            yield line


def commands(md: Path) -> list[list[str]]:
    """Every routedvlm / train-router invocation in `md`'s shell blocks, as argv after the program name."""
    found = []
    for block in SHELL_BLOCK.findall(md.read_text()):
        for line in _lines(block):
            if not COMMAND_LINE.match(line):
                continue
            line = re.sub(r"<[^<>]*>", "PLACEHOLDER", line)  # `--router <a router of that ladder>`
            words = [w.strip("[]") for w in shlex.split(line)]
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # FOO=bar routedvlm ...
                words.pop(0)
            if not words or Path(words[0]).name not in ("routedvlm", "train-router"):
                continue
            argv = []
            for w in words[1:]:
                if w in ENDS_COMMAND or w.startswith(">"):
                    break
                if w:
                    argv.append(w)
            found.append(["train", *argv] if Path(words[0]).name == "train-router" else argv)
    return found


def _parse(argv: list[str]) -> str | None:
    """None when the command's own parser accepts argv, else what argparse said. `...` marks an elided part: the
    arguments shown must parse, the required ones may be among those left out."""
    partial = "..." in argv
    argv = [w for w in argv if w != "..."]
    from routedvlm.cli import COMMANDS

    if not argv or argv[0] not in COMMANDS:
        return f"no such command {argv[:1]}; commands: {sorted(COMMANDS)}"
    module = COMMANDS[argv[0]][0]
    rest = argv[1:]
    parser = DOCS_GEN.capture_parser(module, [])
    also = re.findall(r"also: " + re.escape(argv[0]) + r" ([\w-]+)", COMMANDS[argv[0]][1])
    if rest and rest[0] in also:  # a second parser the command dispatches to (`label merge`)
        parser, rest = DOCS_GEN.capture_parser(module, [rest[0]]), rest[1:]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), _optional(parser, partial):
            parser.parse_args(rest)
    except SystemExit as exc:
        said = err.getvalue().strip().splitlines()[-1]
        if exc.code and not PLACEHOLDER_VALUE.search(said):
            return said
    return None


@contextlib.contextmanager
def _optional(parser, partial: bool):
    """With `...` in the example, nothing is required (the elided part may hold it), so unknown flags still show."""
    saved = [(a, a.required, a.nargs) for a in parser._actions]
    if partial:
        for a in parser._actions:
            a.required = False
            if not a.option_strings and a.nargs is None:
                a.nargs = "?"
    try:
        yield
    finally:
        for a, required, nargs in saved:
            a.required, a.nargs = required, nargs


@pytest.mark.parametrize("md", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_example_parses_with_its_commands_parser(md: Path):
    bad = {" ".join(argv): why for argv in commands(md) if (why := _parse(argv))}
    assert not bad, f"{md.relative_to(ROOT)}: examples the CLI refuses: {bad}"


def test_the_examples_are_found():
    """The extraction itself: the README's quickstart commands, one of them with a continuation and a comment."""
    found = commands(README)
    assert ["train", "--target-accuracy", "0.95", "--delta", "0.1", "--output-dir", "runs/router"] in found
    label = next(c for c in found if c[0] == "label")
    assert "--max-reason-tokens" in label and label[-2:] == ["--out", "labels.parquet"]
    assert _parse(["train", "--no-such-flag"]) and _parse(["serve", "--port"]) and _parse(["nosuch"])
    assert _parse(["labels", "validate", "labels.parquet"]) is None
    assert _parse(["label", "...", "--k-grid", "4,8"]) is None and _parse(["label", "...", "--no-such-flag"])


@pytest.mark.parametrize("md", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_picture_a_page_shows_exists(md: Path):
    pictures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", md.read_text(), flags=re.S))
    missing = [p for p in pictures if not re.match(r"[a-z]+:", p) and not (md.parent / p).is_file()]
    assert not missing, f"{md.relative_to(ROOT)} shows pictures that do not exist: {missing}"
