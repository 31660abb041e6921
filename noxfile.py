"""The test matrix: one session per package (its own venv, only its declared dependencies),
an integration session that launches real multi-process jobs, lint, the example job, and the
install commands of the docs (checked in `install_docs`, run in fresh venvs by `install_lines`).

Every install goes through constraints.txt (torch==2.13.0, the CPU build) and installs our
packages from their folders, never from an index.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent
PACKAGES_DIR = ROOT / "packages"
CONSTRAINTS = str(ROOT / "constraints.txt")
PACKAGES = ["accel-state", "accel-data", "accel-amp", "accel-launch", "accel"]
# Adapters: each has its own session, with its engine installed at the version its issue measured.
DEEPSPEED_PACKAGE = "accel-deepspeed"
DEEPSPEED = "deepspeed==0.19.8"
XLA_PACKAGE = "accel-xla"
# torch_xla 2.9.0 loads only into exactly torch 2.9.0: the xla session installs through these pins
# instead of constraints.txt (torch 2.13.0).
XLA_CONSTRAINTS = str(ROOT / "constraints-xla.txt")
ADAPTERS = [DEEPSPEED_PACKAGE, XLA_PACKAGE]

# What the examples need beyond accel (examples/README: transformers builds models from configs).
EXAMPLE_REQUIREMENTS = ("transformers==5.24.0", "tqdm")
EXAMPLE_TESTS = ROOT / "examples" / "tests"

# Checkers are pinned: a new release that formats or infers differently must not turn main red.
LINT_TOOLS = ("ruff==0.17.6", "import-linter==2.17")
MYPY = "mypy==2.4.1"

nox.options.sessions = [
    "lint",
    "typecheck",
    "docs",
    "install_docs",
    "tests",
    "integration",
    "examples",
    "deepspeed",
    "xla",
]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

TEST_ENV = {
    # Shape checks before every collective in tests (DESIGN.md: "always in tests").
    "ACCEL_DEBUG_MODE": "1",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
}


def _requirement_name(requirement: str) -> str:
    for stop in "<>=!~[;( ":
        requirement = requirement.split(stop)[0]
    return requirement.strip().lower()


def sibling_closure(package: str) -> list[str]:
    """Return `package` and every sibling it depends on, dependencies first."""
    ordered: list[str] = []

    def visit(name: str) -> None:
        if name in ordered:
            return
        meta = tomllib.loads((PACKAGES_DIR / name / "pyproject.toml").read_text())
        for requirement in meta["project"].get("dependencies", []):
            dependency = _requirement_name(requirement)
            if (PACKAGES_DIR / dependency).is_dir():
                visit(dependency)
        ordered.append(name)

    visit(package)
    return ordered


def install_packages(session: nox.Session, *packages: str, extra: str = "test") -> None:
    """Install `packages` and their siblings from their folders in one resolver run."""
    wanted: list[str] = []
    for package in packages:
        for name in sibling_closure(package):
            if name not in wanted:
                wanted.append(name)
    targets = [
        f"{PACKAGES_DIR / name}[{extra}]" if name in packages else str(PACKAGES_DIR / name) for name in wanted
    ]
    session.install("-c", CONSTRAINTS, *targets)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) over the whole tree, then the import contracts of .importlinter."""
    session.install(*LINT_TOOLS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # import-linter reads the sources in place: no package (and no torch) is installed for it.
    source_folders = os.pathsep.join(str(PACKAGES_DIR / name / "src") for name in [*PACKAGES, *ADAPTERS])
    session.run("lint-imports", env={"PYTHONPATH": source_folders})


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over every package's src/ (mypy.ini), with the packages and torch installed for their types."""
    install_packages(session, *PACKAGES)
    # Adapters are checked without their engines (mypy.ini: deepspeed's types are not required).
    session.install("--no-deps", *(str(PACKAGES_DIR / name) for name in ADAPTERS))
    session.install(MYPY)
    session.run("mypy", *(str(PACKAGES_DIR / name / "src") for name in [*PACKAGES, *ADAPTERS]))


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """A package's own unit tests, in a venv with only its declared dependencies.

    Arguments after `--` go to pytest: `nox -s tests -- -m "not slow"` skips the tests that start processes.
    """
    install_packages(session, package)
    session.run("pip", "check")
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(PACKAGES_DIR / package / "tests"),
        *session.posargs,
        env=TEST_ENV,
    )


@nox.session
def integration(session: nox.Session) -> None:
    """Real multi-process jobs through `accel launch` (gloo on CPU); some launch the examples."""
    install_packages(session, *PACKAGES, extra="test")
    session.install("-c", CONSTRAINTS, "tqdm")
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(ROOT / "integration-tests"),
        # The DeepSpeed jobs run in their own session, where deepspeed is installed.
        "--ignore",
        str(ROOT / "integration-tests" / "deepspeed"),
        *session.posargs,
        env=TEST_ENV,
    )


@nox.session
def deepspeed(session: nox.Session) -> None:
    """accel-deepspeed's tests and DeepSpeed jobs on 2 CPU processes (DeepSpeed's CPU accelerator, gloo)."""
    session.install("-c", CONSTRAINTS, DEEPSPEED, "tqdm")
    install_packages(session, *PACKAGES, DEEPSPEED_PACKAGE)
    session.run("pip", "check")
    env = {
        **TEST_ENV,
        "DS_ACCELERATOR": "cpu",
        # Ops DeepSpeed compiles (the CPU Adam of the offload test) are built inside this venv.
        "TORCH_EXTENSIONS_DIR": str(Path(session.virtualenv.location) / "torch_extensions"),
    }
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(PACKAGES_DIR / DEEPSPEED_PACKAGE / "tests"),
        # The launcher's DeepSpeed flags come from the adapter's launch hook: tested where it is installed.
        str(PACKAGES_DIR / "accel-launch" / "tests" / "test_launch_deepspeed.py"),
        str(ROOT / "integration-tests" / "deepspeed"),
        str(EXAMPLE_TESTS / "test_deepspeed_zero3.py"),
        *session.posargs,
        env=env,
    )


@nox.session
def xla(session: nox.Session) -> None:
    """accel-xla's tests on XLA's CPU device (PJRT_DEVICE=CPU), with torch and torch_xla 2.9.0.

    Its tests drive an Accelerator, so the facade and its siblings are installed beside the adapter,
    all from their folders in one resolver run.
    """
    siblings = (str(PACKAGES_DIR / name) for name in sibling_closure("accel"))
    targets = [*siblings, f"{PACKAGES_DIR / XLA_PACKAGE}[test]", "tqdm"]
    session.install("-c", XLA_CONSTRAINTS, *targets)
    session.run("pip", "check")
    env = {**TEST_ENV, "PJRT_DEVICE": "CPU"}
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(PACKAGES_DIR / XLA_PACKAGE / "tests"),
        # The launcher's XLA flag and replica start come from the adapter's launch hook.
        str(PACKAGES_DIR / "accel-launch" / "tests" / "test_launch_xla.py"),
        str(EXAMPLE_TESTS / "test_xla.py"),
        *session.posargs,
        env=env,
    )


@nox.session
def benchmark_xla(session: nox.Session) -> None:
    """The basic loop on XLA's CPU device through accel vs written by hand with torch_xla (graphs
    compiled, steps/s ratio), with torch and torch_xla 2.9.0 installed as in the xla session."""
    siblings = (str(PACKAGES_DIR / name) for name in sibling_closure("accel"))
    session.install("-c", XLA_CONSTRAINTS, *siblings, str(PACKAGES_DIR / XLA_PACKAGE))
    session.run(
        "python",
        str(ROOT / "benchmarks" / "xla_loop.py"),
        *session.posargs,
        env={"PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "1"},
    )


# The docs' tools, pinned like the checkers: a new release that warns differently must not turn main red.
DOCS_TOOLS = (
    "mkdocs==1.6.1",
    "mkdocs-material==9.8.2",
    "mkdocstrings==1.0.8",
    "mkdocstrings-python==2.0.11",
    "griffelib==2.4.1",
    "ruff==0.17.6",  # mkdocstrings formats the rendered signatures with it
)


@nox.session
def docs(session: nox.Session) -> None:
    """The API reference and guides (mkdocs.yml): every public name must have a docstring and a
    reference entry (docs/check_docstrings.py), then `mkdocs build --strict` turns warnings into errors.

    griffe reads the packages' sources in place (mkdocs.yml `paths`), so neither they nor torch are
    installed. The site goes to site/ (or the folder given after `--`).
    """
    session.install("-c", CONSTRAINTS, *DOCS_TOOLS)
    session.run("python", str(ROOT / "docs" / "check_docstrings.py"))
    site = session.posargs[0] if session.posargs else str(ROOT / "site")
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        str(ROOT / "mkdocs.yml"),
        "--site-dir",
        site,
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


INSTALL_TESTS = ROOT / "install-tests"


@nox.session
def install_docs(session: nox.Session) -> None:
    """Every install command the docs and error messages show names our packages by their folders,
    with the siblings they need and the constraints (install-tests/, reading the files only)."""
    session.install("-c", CONSTRAINTS, "pytest")
    session.run(
        "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", str(INSTALL_TESTS), *session.posargs
    )


@nox.session
def install_lines(session: nox.Session) -> None:
    """Every install command the docs and error messages show, run as written from the repository
    root in a fresh venv each (about 12 minutes): ours from their folders, the CPU torch, imports.

    Not in the default sessions for its length; `nox -s install_lines -- -k accel-state` runs some.
    """
    session.install("-c", CONSTRAINTS, "pytest")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-rs", str(INSTALL_TESTS), *session.posargs)


@nox.session
def example(session: nox.Session) -> None:
    """The main job: the NLP example (a tiny transformer text classifier) on 2 CPU processes."""
    install_packages(session, "accel", extra="test")
    session.install("-c", CONSTRAINTS, *EXAMPLE_REQUIREMENTS)
    session.run(
        "accel", "launch", "--cpu", "--num_processes", "2", str(ROOT / "examples" / "nlp_classification.py")
    )


@nox.session
def examples(session: nox.Session) -> None:
    """Every example on 2 CPU processes through `accel launch`, each checked by its metric. The
    DeepSpeed and XLA examples run in their engines' sessions."""
    install_packages(session, *PACKAGES, extra="test")
    session.install("-c", CONSTRAINTS, *EXAMPLE_REQUIREMENTS, "tensorboard")
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(EXAMPLE_TESTS),
        "--ignore",
        str(EXAMPLE_TESTS / "test_deepspeed_zero3.py"),
        "--ignore",
        str(EXAMPLE_TESTS / "test_xla.py"),
        *session.posargs,
        env=TEST_ENV,
    )


@nox.session
def benchmark(session: nox.Session) -> None:
    """Every benchmark: each measures accel against raw PyTorch in the same run."""
    install_packages(session, "accel", extra="test")
    for script in (
        "overhead.py",
        "data_loader.py",
        "precision.py",
        "launch_overhead.py",
        "checkpoint.py",
        "collectives.py",
        "fsdp_memory.py",
    ):
        session.run("python", str(ROOT / "benchmarks" / script))


@nox.session
def benchmark_deepspeed(session: nox.Session) -> None:
    """accel on ZeRO-2 against a hand-driven DeepSpeed engine, 2 CPU processes (steps/s ratio)."""
    session.install("-c", CONSTRAINTS, DEEPSPEED)
    install_packages(session, *PACKAGES, DEEPSPEED_PACKAGE)
    session.run(
        "python",
        str(ROOT / "benchmarks" / "deepspeed_zero2.py"),
        env={"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"},
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Head to head: raw PyTorch vs accel vs Accelerate, every figure in one run (`python -m benchmarks`);
    table on stdout, JSON and plots in benchmarks/results, benchmarks/README.md regenerated.

    Arguments after `--` go to the runner: `nox -s bench -- --quick`, `-- --only training --rounds 7`.
    """
    # Accelerate is the contender, pinned to the version the targets were set against; matplotlib draws.
    session.install("-c", CONSTRAINTS, DEEPSPEED, "accelerate==1.15.0", "matplotlib")
    install_packages(session, *PACKAGES, DEEPSPEED_PACKAGE)
    session.run("python", "-m", "benchmarks", *session.posargs, env={"OMP_NUM_THREADS": "1"})
