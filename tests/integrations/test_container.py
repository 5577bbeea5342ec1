"""The container image definitions (integrations/container): the entrypoint's environment -> `routedvlm serve`
command line (run here, outside an image), and the Containerfiles install every package folder and the lock."""
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "integrations" / "container"
ENTRYPOINT = DIR / "entrypoint.sh"


def entrypoint(env: dict, *args, dry_run=True):
    full = {"PATH": os.environ["PATH"], **({"ROUTEDVLM_ENTRYPOINT_DRY_RUN": "1"} if dry_run else {}), **env}
    return subprocess.run(["bash", str(ENTRYPOINT), *args], capture_output=True, text=True, timeout=60, env=full)


def test_environment_becomes_serve_flags():
    from routedvlm.inference.serving.cli import ServeConfig, build_parser

    run = entrypoint({"ROUTEDVLM_MODELS": "http://a:8000/v1#s http://b:8000/v1#m", "ROUTEDVLM_LARGE": "http://c/v1#l",
                      "ROUTEDVLM_ROUTER": "/router", "HOSTNAME": "serve-7f9c-abcde", "ROUTEDVLM_SERVE_MAX_QUEUED": "128",
                      "ROUTEDVLM_SERVE_AUDIT_STORE_INPUTS": "true", "ROUTEDVLM_SERVE_AUDIT_RATE": "0.1"},
                     "--max-images", "2")
    assert run.returncode == 0, run.stderr
    argv = run.stdout.splitlines()
    assert argv[:2] == ["routedvlm", "serve"]
    cfg = ServeConfig(**vars(build_parser().parse_args(argv[2:])))
    assert cfg.models == ["http://a:8000/v1#s", "http://b:8000/v1#m", "http://c/v1#l"]  # the ladder, cheapest first
    assert (cfg.router, cfg.host, cfg.port, cfg.replica_id) == ("/router", "0.0.0.0", 8000, "serve-7f9c-abcde")
    assert (cfg.max_queued, cfg.audit_store_inputs, cfg.audit_rate, cfg.max_images) == (128, True, 0.1, 2)


def test_a_switch_with_a_wrong_value_is_refused_by_name():
    run = entrypoint({"ROUTEDVLM_SMALL": "a", "ROUTEDVLM_LARGE": "b", "ROUTEDVLM_SERVE_AUDIT_STORE_INPUTS": "maybe"})
    assert run.returncode == 2
    assert run.stderr.startswith("error: ROUTEDVLM_SERVE_AUDIT_STORE_INPUTS must be 1/true/yes or 0/false/no")


def test_a_command_runs_instead_of_serve_and_serve_s_own_errors_reach_the_caller():
    run = entrypoint({}, "echo", "inside the image", dry_run=False)
    assert (run.returncode, run.stdout) == (0, "inside the image\n")
    bindir = str(Path(sys.executable).parent)
    run = entrypoint({"PATH": f"{bindir}:{os.environ['PATH']}", "ROUTEDVLM_SMALL": "a"}, dry_run=False)
    assert run.returncode != 0 and "error: `routedvlm serve` needs 2 to" in run.stderr


@pytest.mark.parametrize("name, lock", [("Containerfile", "requirements.txt"), ("Containerfile.cuda", "requirements-gpu.txt")])
def test_the_image_installs_its_lock_and_every_package_folder(name, lock):
    text = (DIR / name).read_text()
    copies = [line.split()[1:-1] for line in text.splitlines() if line.startswith("COPY ")]
    sources = {src for srcs in copies for src in srcs}
    assert all((ROOT / src).exists() for src in sources), sorted(s for s in sources if not (ROOT / s).exists())
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    roots = {d.split("/")[0] for d in package_dirs.values()}
    assert roots <= sources, sorted(roots - sources)  # a folder not copied would be missing from the image
    assert re.search(rf"pip install --no-deps --require-hashes .*-r {re.escape(lock)}", text)
    assert lock in sources and "integrations/container/entrypoint.sh" in sources
    assert 'ENTRYPOINT ["/usr/local/bin/routedvlm-entrypoint"]' in text and "USER 10001" in text


@pytest.mark.parametrize("bad", ["two words", "-leading-dash", "x" * 64, "ünïcode"])
def test_a_replica_id_that_cannot_name_a_process_is_refused(bad):
    from routedvlm.errors import ConfigError
    from routedvlm.inference.serving.cli import ServeConfig

    with pytest.raises(ConfigError, match=r"^The `--replica-id` flag must be 1 to 63 letters, digits"):
        ServeConfig(small="a", large="b", replica_id=bad)
    assert ServeConfig(small="a", large="b", replica_id="rv-routedvlm-6d4f9c-x2z").replica_id == "rv-routedvlm-6d4f9c-x2z"
