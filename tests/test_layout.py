"""Architecture contract (DESIGN.md): the packages import each other only in the allowed direction, without cycles.

`errors` (routedvlm.errors) imports nothing and every package may import it; router imports none of the others;
inference may import router; data may import inference and router; training may import router and data.
Exceptions are listed here on purpose, each with its reason. Relative imports count like absolute ones.
"""
import ast
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10 (pyproject allows it): pip, in every venv, vendors the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("errors", "router", "inference", "data", "training", "routedvlm")
ALLOWED = {
    # the package face (routedvlm/__init__.py) re-exports the public names of every package, lazily
    "routedvlm": {"errors", "router", "inference", "data", "training"},
    "errors": set(),
    "router": {"errors"},
    "inference": {"errors", "router"},
    "data": {"errors", "router", "inference"},
    "training": {"errors", "router", "data"},
}
# file -> packages it may import beyond its package's rule, and why
EXCEPTIONS = {
    # the probe router type runs on the small VLM: it loads its base through the inference loader, lazily,
    # so the LightGBM path stays free of torch (tests/router/test_load.py checks that).
    "router/lora_probe/router.py": {"inference"},
    "router/lora_probe/net.py": {"inference"},
    # the self-probe's training inputs are recomputed by the pipeline RoutedVLM runs (CollaborativePipeline with
    # the hidden-state capture on, transformers or a vLLM engine), so training and run-time inputs are the same numbers.
    "training/probe/hidden_states.py": {"inference"},
    # composition roots: the demo and the CLI wire every package together.
    "training/demo/cli.py": {"inference"},
    "training/demo/toy.py": {"inference"},
    # `routedvlm serve --audit-log` opens the audit log, which reuses the labeller's parts and lock code (data):
    # the serve CLI wires it into RoutedVLM as a plain callable, lazily; the rest of inference never sees data.
    "inference/serving/cli.py": {"data"},
    # the old path of the `routedvlm` command, for console scripts installed before it moved to the face (routedvlm.cli)
    "training/cli.py": {"cli"},
}


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _modules() -> dict[str, Path]:
    """module name -> file, for every module of the distribution (from pyproject's package-dir mapping)."""
    found = {}
    for pkg, folder in _setuptools()["package-dir"].items():
        for path in (ROOT / folder).glob("*.py"):
            found[pkg if path.name == "__init__.py" else f"{pkg}.{path.stem}"] = path
    return found


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts if parts[:1] == ["routedvlm"] else ["routedvlm", *parts])


def _absolute(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module an ImportFrom names (relative imports resolved from the file's own package)."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(nodes, path: Path, modules: dict[str, Path]) -> set[str]:
    """The routedvlm modules that these import statements load (a name imported from a package that is itself a
    module counts as that module)."""
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(node, path)
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
        else:
            continue
        for name in targets:
            while name not in modules and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in modules:
                found.add(name)
    return found


def _imported_packages(path: Path) -> set[str]:
    modules = _modules()
    return {name.split(".")[1] for name in _imports(ast.walk(ast.parse(path.read_text())), path, modules)
            if name.split(".")[0] == "routedvlm" and len(name.split(".")) > 1}


def test_packages_import_only_in_the_allowed_direction():
    problems = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            allowed = ALLOWED[pkg] | {pkg} | EXCEPTIONS.get(rel, set())
            bad = _imported_packages(path) - allowed
            if bad:
                problems.append(f"{rel} imports routedvlm.{sorted(bad)}")
    assert not problems, "dependency direction broken:\n" + "\n".join(problems)


def test_relative_imports_resolve_like_the_package_mapping():
    """The check above resolves relative imports by folder; that must agree with pyproject's mapping."""
    modules = _modules()
    assert all(_module_name(path) == name for name, path in modules.items())
    assert _imported_packages(ROOT / "data" / "labelling" / "job.py") >= {"data", "errors"}


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """Import statements that run when the module is imported (not inside functions, not under TYPE_CHECKING)."""
    out, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
        elif isinstance(node, ast.With):
            todo += node.body
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_level_import_cycles():
    modules = _modules()
    graph = {name: _imports(_module_level(ast.parse(path.read_text())), path, modules) - {name}
             for name, path in modules.items()}
    assert not _cycles(graph), f"module-level import cycles: {_cycles(graph)}"


def _all_imports(tree: ast.Module) -> list[ast.stmt]:
    """Every import statement of a module, inside functions too (only `if TYPE_CHECKING:` blocks left out)."""
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for stmt in node.body for n in ast.walk(stmt)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]


def test_no_import_cycles_counting_imports_inside_functions():
    """A lazy import (kept off the `--help` path: torch, mlflow, lightgbm) is fine, as long as it closes no circle."""
    modules = _modules()
    graph = {name: _imports(_all_imports(ast.parse(path.read_text())), path, modules) - {name}
             for name, path in modules.items()}
    cycles = _cycles(graph)
    assert not cycles, f"import cycles (counting imports inside functions): {cycles}"


def test_function_level_imports_are_seen():
    """The check above sees an import inside a function and leaves out TYPE_CHECKING blocks."""
    tree = ast.parse("import typing\nif typing.TYPE_CHECKING:\n    import a\ndef f():\n    from b import c\n")
    assert [ast.unparse(n) for n in _all_imports(tree)] == ["import typing", "from b import c"]


def test_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_folder_is_in_the_distribution():
    """A folder with an __init__.py that pyproject does not list would be missing from a (non-editable) wheel."""
    cfg = _setuptools()
    mapped = {(ROOT / folder).resolve() for folder in cfg["package-dir"].values()}
    assert set(cfg["packages"]) == set(cfg["package-dir"])
    folders = {init.parent.resolve() for pkg in PACKAGES for init in (ROOT / pkg).rglob("__init__.py")}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders - mapped)
    assert not missing, f"package folders not mapped in pyproject.toml: {missing}"


def test_every_module_says_what_it_is_for():
    missing = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if not ast.get_docstring(ast.parse(path.read_text())):
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"modules without a docstring: {missing}"
