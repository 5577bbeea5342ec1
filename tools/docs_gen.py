"""mkdocs hooks: the CLI reference from the argparse parsers and the API reference from the packages' public names.

Both are generated at build time (`mkdocs build`, `make test`), so a moved module or a new flag never leaves the
site stale: the commands come from `routedvlm.cli.COMMANDS`, each one's parser is captured from its own
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
    ("reference/api/index.md", "routedvlm", "The package face: `from routedvlm import ...`."),
    ("reference/api/inference.md", "routedvlm.inference", "Models, the collaborative pipeline, RoutedVLM."),
    ("reference/api/router.md", "routedvlm.router", "Routers: load, decide, the policy file."),
    ("reference/api/training.md", "routedvlm.training", "train-router as a library."),
    ("reference/api/data.md", "routedvlm.data", "Samples, adapters, labels and the labelling job."),
    ("reference/api/errors.md", "routedvlm.errors", "The error tree."),
]
# routedvlm.data keeps its names in its subpackages; they are documented on the data page
DATA_SUBPACKAGES = ["routedvlm.data.labels", "routedvlm.data.labelling", "routedvlm.data.scorers"]
# entry points of a package that exports nothing at package level, found in whichever of its modules defines them
ENTRY_POINTS = {"routedvlm.training": ["train_router", "TrainConfig"]}
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
    from routedvlm import cli

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


def _defined_in(package: str, name: str) -> str:
    """The module of `package` that defines `name` (read from the source, nothing imported)."""
    import ast

    folder = Path(importlib.import_module(package).__path__[0])
    for path in sorted(folder.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                rel = path.relative_to(folder).with_suffix("")
                parts = [p for p in rel.parts if p != "__init__"]
                return ".".join([package, *parts])
    raise LookupError(f"{name} is defined nowhere in {package} ({folder}); update ENTRY_POINTS in {__file__}")


def _package_section(package: str, level: str) -> list[str]:
    module = importlib.import_module(package)
    doc = inspect.getdoc(module) or ""
    parts = [f"{level} `{package}`", doc]
    names = _public_names(module)
    if not names and package in ENTRY_POINTS:
        for name in ENTRY_POINTS[package]:
            parts.append(f"{level}# `{name}`\n\nDefined in `{_defined_in(package, name)}`.\n\n"
                         f"::: {_defined_in(package, name)}.{name}\n"
                         "    options:\n      show_root_heading: false\n      show_root_toc_entry: false")
    if not names and package == "routedvlm":
        parts.append("The package face exports nothing yet: import from the subpackages below.")
    for name in names:
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
    parts += _package_section(package, "#")[1:]
    if package == "routedvlm.data":
        for sub in DATA_SUBPACKAGES:
            parts += _package_section(sub, "##")
    return "\n\n".join(p for p in parts if p) + "\n"


def package_dirs() -> dict[str, str]:
    """pyproject.toml's `[tool.setuptools.package-dir]`: package name -> folder (tomllib needs Python 3.11)."""
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the table is plain `"name" = "folder"` lines
        section = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
        return dict(re.findall(r'^"([\w.]+)"\s*=\s*"([^"]+)"', section, flags=re.M))
    return tomllib.loads(text)["tool"]["setuptools"].get("package-dir", {})


def source_tree() -> Path:
    """A `routedvlm/` tree of links to the package folders (pyproject's package-dir), for griffe's static reader."""
    import shutil

    mapping = package_dirs()
    tree = ROOT / "build" / "docs-src"
    top = tree / "routedvlm"
    if top.is_symlink():
        top.unlink()
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    subpackages = {name.split(".")[1]: ROOT / folder for name, folder in mapping.items() if name.count(".") == 1}
    if "routedvlm" in mapping:  # the package face's own folder (its __init__.py and any modules beside it)
        for entry in (ROOT / mapping["routedvlm"]).iterdir():
            if entry.name not in subpackages and entry.name != "__pycache__":
                (top / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for name, folder in subpackages.items():
        (top / name).symlink_to(folder, target_is_directory=True)
    return tree


try:
    from mkdocs.plugins import event_priority
except ImportError:  # the tests read GENERATED_PAGES without mkdocs
    def event_priority(priority):
        return lambda f: f


@event_priority(100)  # before mkdocstrings reads its `paths`
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
