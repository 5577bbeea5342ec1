"""mkdocs hooks: the CLI reference from the argparse parsers and the API reference from the packages' public names.

Both are generated at build time (`mkdocs build`, `make test`), so a moved module or a new flag never leaves the
site stale: the commands come from `routedvlm.training.cli.COMMANDS`, each one's parser is captured from its own
`main(argv)`, and each public name is documented where its package exports it, whatever module defines it.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = "reference/cli.md"
# the public face documented on the API pages: (page, package, one line)
API_PACKAGES = [
    ("reference/api/inference.md", "routedvlm.inference", "Models, the collaborative pipeline, RoutedVLM."),
    ("reference/api/router.md", "routedvlm.router", "Routers: load, decide, the policy file."),
    ("reference/api/training.md", "routedvlm.training", "train-router as a library."),
    ("reference/api/data.md", "routedvlm.data", "Samples, adapters, labels and the labelling job."),
    ("reference/api/errors.md", "routedvlm.errors", "The error tree."),
]
# routedvlm.data keeps its names in its subpackages; they are documented on the data page
DATA_SUBPACKAGES = ["routedvlm.data.labels", "routedvlm.data.labelling", "routedvlm.data.scorers"]
GENERATED_PAGES = [CLI_PAGE] + [page for page, _, _ in API_PACKAGES]


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def capture_parser(module: str, argv: list[str], **kwargs) -> argparse.ArgumentParser:
    """The parser a command's `main(argv)` builds, taken at the moment it parses (nothing runs)."""
    original = argparse.ArgumentParser.parse_known_args

    def _take(self, *args, **kw):
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = _take
    try:
        importlib.import_module(module).main(argv, **kwargs)
    except _Captured as got:
        return got.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise RuntimeError(f"{module}.main({argv}) returned without parsing arguments")


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip()


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def cli_markdown() -> str:
    from routedvlm.training import cli

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "110"
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            cli.main(["--help"])
        parts = ["# CLI reference", "Generated from the argparse parsers when the site is built. "
                 "`train-router` is the same command as `routedvlm train`.",
                 "## routedvlm", f"```text\n{out.getvalue().rstrip()}\n```"]
        for name, (module, desc) in cli.COMMANDS.items():
            title = "routedvlm train / train-router" if name == "train" else f"routedvlm {name}"
            parser = capture_parser(module, [])
            parts += [f"## {title}", desc[:1].upper() + desc[1:] + ".", f"```text\n{_help(parser)}\n```"]
            for sub, sub_parser in _subparsers(parser):
                parts += [f"### routedvlm {name} {sub}", f"```text\n{_help(sub_parser)}\n```"]
            for also in re.findall(r"also: " + re.escape(name) + r" ([\w-]+)", desc):
                parts += [f"### routedvlm {name} {also}", f"```text\n{_help(capture_parser(module, [also]))}\n```"]
        return "\n\n".join(parts) + "\n"
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)
                 and getattr(v, "__module__", "").startswith(module.__name__)]
    return sorted(names)


def _package_section(package: str, level: str) -> list[str]:
    module = importlib.import_module(package)
    doc = inspect.getdoc(module) or ""
    parts = [f"{level} `{package}`", doc]
    for name in _public_names(module):
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            where = obj.__module__
            if not where.startswith(package) and where.startswith("routedvlm."):
                parts.append(f"{level}# `{package}.{name}`\n\nRe-exported from `{where}`.")
                continue
            parts.append(f"{level}# `{package}.{name}`\n\n::: {where}.{obj.__qualname__}\n"
                         "    options:\n      show_root_heading: false\n      show_root_toc_entry: false")
        else:
            parts.append(f"{level}# `{package}.{name}`\n\n```python\n{package}.{name} = {obj!r}\n```")
    return parts


def api_markdown(package: str, summary: str) -> str:
    parts = [f"# `{package}`", summary + " Generated from the docstrings of the names the package exports."]
    parts += _package_section(package, "##")[1:]
    if package == "routedvlm.data":
        for sub in DATA_SUBPACKAGES:
            parts += _package_section(sub, "##")
    return "\n\n".join(p for p in parts if p) + "\n"


def source_tree() -> Path:
    """A `routedvlm/` tree of links to the package folders (pyproject's package-dir), for griffe's static reader."""
    import tomllib

    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"].get("package-dir", {})
    tree = ROOT / "build" / "docs-src"
    top = tree / "routedvlm"
    if top.is_symlink() or top.is_file():
        top.unlink()
    top.mkdir(parents=True, exist_ok=True)
    for link in top.iterdir():
        if link.is_symlink():
            link.unlink()
    if "routedvlm" in mapping:  # the whole package lives in one folder
        top.rmdir()
        top.symlink_to(ROOT / mapping["routedvlm"], target_is_directory=True)
        return tree
    for name, folder in mapping.items():
        parts = name.split(".")
        if len(parts) == 2:
            (top / parts[1]).symlink_to(ROOT / folder, target_is_directory=True)
    return tree


def on_config(config, **kwargs):
    source_tree()
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    sys.path.insert(0, str(ROOT))
    files.append(File.generated(config, CLI_PAGE, content=cli_markdown()))
    for page, package, summary in API_PACKAGES:
        files.append(File.generated(config, page, content=api_markdown(package, summary)))
    return files
