"""Architecture contract (DESIGN.md): the four packages import each other only in the allowed direction.

router imports none of the others; inference may import router; data may import inference and router;
training may import router and data. Exceptions are listed here on purpose, each with its reason.
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("router", "inference", "data", "training")
ALLOWED = {
    "router": set(),
    "inference": {"router"},
    "data": {"router", "inference"},
    "training": {"router", "data"},
}
# file -> packages it may import beyond its package's rule, and why
EXCEPTIONS = {
    # the probe router type runs on the small VLM: it loads its base through the inference loader, lazily,
    # so the LightGBM path stays free of torch (tests/router/test_load.py checks that).
    "router/lora_probe.py": {"inference"},
    # the self-probe's training inputs are recomputed by the pipeline RoutedVLM runs (CollaborativePipeline with
    # the hidden-state capture on), so training and run-time inputs are the same numbers.
    "training/probe/self_probe.py": {"inference"},
    # composition roots: the demo and the CLI wire every package together.
    "training/demo/cli.py": {"inference"},
    "training/demo/toy.py": {"inference"},
}


def _imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "routedvlm" and len(parts) > 1 and parts[1] in PACKAGES:
                found.add(parts[1])
    return found


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


def test_every_module_says_what_it_is_for():
    missing = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if not ast.get_docstring(ast.parse(path.read_text())):
                missing.append(path.relative_to(ROOT).as_posix())
    assert not missing, f"modules without a docstring: {missing}"
