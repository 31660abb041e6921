"""The test matrix: one session per package (its own venv, only its declared dependencies),
an integration session that launches real multi-process jobs, lint, the example job, the install
commands of the docs (checked in `install_docs`, run in fresh venvs by `install_lines`), one
session per engine (`engines`, from the ENGINES table), the trackers against their real libraries
(`trackers`) and the benchmarks (`bench`, and `bench_engines` for the figures that need an engine's venv).

Every install goes through constraints.txt (torch==2.13.0, the CPU build; an engine's table row
may name its own) and installs our packages from their folders, never from an index.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent
PACKAGES_DIR = ROOT / "packages"
CONSTRAINTS = str(ROOT / "constraints.txt")
PACKAGES = ["accel-state", "accel-data", "accel-amp", "accel-launch", "accel-big-modeling", "accel"]
DEEPSPEED = "deepspeed==0.19.8"

# What the examples need beyond accel (examples/README: transformers builds models from configs).
EXAMPLE_REQUIREMENTS = ("transformers==5.24.0", "tqdm")
EXAMPLE_TESTS = ROOT / "examples" / "tests"
INTEGRATION_TESTS = ROOT / "integration-tests"

# The tracking libraries `trackers` runs our trackers against, offline, at the versions it was checked with.
TRACKER_LIBRARIES = (
    "wandb==0.31.0",
    # MLflow's client and its SQLite store: the full `mlflow` adds its server and UI, not needed here.
    "mlflow-skinny==3.18.0",
    "sqlalchemy==2.1.9",
    "alembic==1.20.1",
    "aim==3.29.1",
    "comet_ml==3.58.8",
    "clearml==2.1.12",
    "dvclive==3.49.1",
    "swanlab==0.10.3",
    "trackio==0.43.0",
    # What the tests log as images.
    "numpy==2.4.6",
    "pillow==12.3.0",  # trackio 0.43.0 takes pillow<13
)
TRACKER_TESTS = INTEGRATION_TESTS / "trackers"


@dataclass(frozen=True)
class Engine:
    """What an engine's sessions (`engines`, `bench_engines`) install and run, in a venv of their own."""

    # Our adapter package, its engine behind the Backend seam.
    adapter: str
    # Every install of the venv goes through this file.
    constraints: str
    # Installed first, if any: the engine at the version its adapter's issue measured.
    pins: tuple[str, ...]
    # Ours, installed from their folders with their siblings in one resolver run after the pins ...
    packages: tuple[str, ...]
    # ... these with their `test` extra ...
    with_tests: tuple[str, ...]
    # ... and these from the index beside them (what the tests need beyond the extras).
    beside: tuple[str, ...]
    env: dict[str, str]
    # What `engines` runs with pytest (nothing else runs these: `integration` and `examples` skip them).
    tests: tuple[Path, ...]
    # What `bench_engines` measures: `python -m benchmarks --only FIGURES`.
    figures: str


ENGINES = {
    # DeepSpeed's CPU accelerator, gloo, 2 CPU processes.
    "deepspeed": Engine(
        adapter="accel-deepspeed",
        constraints=CONSTRAINTS,
        pins=(DEEPSPEED, "tqdm"),
        packages=(*PACKAGES, "accel-deepspeed"),
        with_tests=(*PACKAGES, "accel-deepspeed"),
        beside=(),
        env={"DS_ACCELERATOR": "cpu"},
        tests=(
            PACKAGES_DIR / "accel-deepspeed" / "tests",
            # The launcher's DeepSpeed flags come from the adapter's launch hook: tested where installed.
            PACKAGES_DIR / "accel-launch" / "tests" / "launch" / "test_launch_deepspeed.py",
            INTEGRATION_TESTS / "deepspeed",
            EXAMPLE_TESTS / "test_deepspeed_zero3.py",
        ),
        figures="engines",
    ),
    # XLA's CPU device. torch_xla 2.9.0 loads only into exactly torch 2.9.0: this venv installs
    # through constraints-xla.txt instead of constraints.txt (torch 2.13.0). Its tests drive an
    # Accelerator, so the facade and its siblings are installed beside the adapter.
    "xla": Engine(
        adapter="accel-xla",
        constraints=str(ROOT / "constraints-xla.txt"),
        pins=(),  # torch and torch_xla come through the constraints, with the packages
        packages=("accel", "accel-xla"),
        with_tests=("accel-xla",),
        beside=("tqdm",),
        env={"PJRT_DEVICE": "CPU"},
        tests=(
            PACKAGES_DIR / "accel-xla" / "tests",
            # The launcher's XLA flag and replica start come from the adapter's launch hook.
            PACKAGES_DIR / "accel-launch" / "tests" / "launch" / "test_launch_xla.py",
            EXAMPLE_TESTS / "test_xla.py",
        ),
        figures="xla",
    ),
}
ADAPTERS = [engine.adapter for engine in ENGINES.values()]

# Checkers are pinned: a new release that formats or infers differently must not turn main red.
LINT_TOOLS = ("ruff==0.17.6", "import-linter==2.17")
MYPY = "mypy==2.4.1"

# `nox` alone: the main matrix (about 40-50 minutes on 2 cores). The engines' sessions (DeepSpeed
# and PyTorch/XLA, each installing its engine: about 12-15 minutes), the trackers (about 4), Ray
# Train and SLURM (about 5 each) are the second call, `nox -s engines trackers ray slurm`, which
# .ci/run gives a budget of its own (40 minutes); the README names both calls.
nox.options.sessions = [
    "lint",
    "typecheck",
    "docs",
    "install_docs",
    "tests",
    "integration",
    "examples",
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


def install_packages(
    session: nox.Session,
    *packages: str,
    extra: str = "test",
    extra_for: Collection[str] | None = None,
    constraints: str = CONSTRAINTS,
    beside: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> None:
    """Install `packages` and their siblings from their folders in one resolver run, `packages` (or
    those of `extra_for`) with `extra`, and the requirements `beside` from the index."""
    wanted: list[str] = []
    for package in packages:
        for name in sibling_closure(package):
            if name not in wanted:
                wanted.append(name)
    with_extra = packages if extra_for is None else extra_for
    targets = [f"{PACKAGES_DIR / name}[{extra}]" if name in with_extra else str(PACKAGES_DIR / name)
               for name in wanted]  # fmt: skip
    share_torch(session, constraints)
    session.install("-c", constraints, *targets, *beside, env=env)


def _pinned_torch(constraints: str) -> str | None:
    """Return the `torch==X` line of `constraints`, or None where the file pins no torch."""
    for line in Path(constraints).read_text().splitlines():
        if _requirement_name(line) == "torch" and "==" in line:
            return line.split("#")[0].strip()
    return None


def _site_packages(session: nox.Session, python: str) -> Path:
    output = session.run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                         silent=True, external=True)  # fmt: skip
    return Path(str(output).strip().splitlines()[-1])


def share_torch(session: nox.Session, constraints: str = CONSTRAINTS) -> None:
    """Make the pinned torch of `constraints` importable in this session's venv from one shared venv.

    torch takes about 1 GB installed; nine sessions holding a copy each filled CI's disk before the
    XLA session's own torch could install. Instead torch is installed once per run into
    `.nox/shared-torch-<version>`, and a `.pth` file puts that venv's site-packages at the end of
    this venv's `sys.path`: pip then finds the pin satisfied and installs no second copy, while
    everything the session installs itself still comes first. A venv whose constraints pin another
    torch (XLA's) installs its own, beside its engine.
    """
    pin = _pinned_torch(constraints)
    location = getattr(session.virtualenv, "location", None)
    if constraints != CONSTRAINTS or pin is None or not location:
        return
    venv = Path(location)
    shared = venv.parent / f"shared-torch-{pin.split('==')[1]}"
    python = str(shared / "bin" / "python")
    done = shared / "torch-installed"
    if not done.exists():
        session.run("python", "-m", "venv", "--clear", str(shared), external=True)
        session.run(python, "-m", "pip", "install", "-q", "-c", constraints, pin, external=True)
        done.write_text(pin + "\n")
    link = _site_packages(session, "python") / "shared-torch.pth"
    link.write_text(f"{_site_packages(session, python)}\n")


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
    """Real multi-process jobs through `accel launch` (gloo on CPU); some launch the examples, and
    the N-D parallelism job trains a tiny transformers Llama with its own tensor parallel plan."""
    install_packages(session, *PACKAGES, extra="test")
    session.install("-c", CONSTRAINTS, *EXAMPLE_REQUIREMENTS)
    session.run(
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(INTEGRATION_TESTS),
        # The engines' jobs run in their own sessions, where the engines are installed; so do the
        # tracking libraries' tests (`trackers`) and the cluster engines' (`ray`, `slurm`).
        *_ignored_engine_tests(INTEGRATION_TESTS),
        *(
            arg
            for folder in (TRACKER_TESTS, INTEGRATION_TESTS / "ray", INTEGRATION_TESTS / "slurm")
            for arg in ("--ignore", str(folder))
        ),
        *session.posargs,
        env=TEST_ENV,
    )


def _ignored_engine_tests(folder: Path) -> list[str]:
    """Return pytest's `--ignore` of every engine test inside `folder` (they run in `engines`)."""
    ignored = [path for engine in ENGINES.values() for path in engine.tests if path.is_relative_to(folder)]
    return [argument for path in ignored for argument in ("--ignore", str(path))]


def install_engine(session: nox.Session, engine: Engine) -> dict[str, str]:
    """Install `engine`'s venv (the engine's pins first, then ours from their folders); return its env."""
    share_torch(session, engine.constraints)
    # An engine may pull a multi-GB torch of its own (XLA's CUDA build of 2.9.0): pip keeps no second
    # copy of those downloads in its cache, which would double what the venv costs the disk.
    no_cache = {"PIP_NO_CACHE_DIR": "1"}
    if engine.pins:
        session.install("-c", engine.constraints, *engine.pins, env=no_cache)
    install_packages(session, *engine.packages, extra_for=engine.with_tests, constraints=engine.constraints,
                     beside=engine.beside, env=no_cache)  # fmt: skip
    # Ops an engine compiles (DeepSpeed's CPU Adam of the offload test) are built inside this venv.
    extensions = str(Path(session.virtualenv.location) / "torch_extensions")
    return {**engine.env, "TORCH_EXTENSIONS_DIR": extensions}


@nox.session
@nox.parametrize("backend", list(ENGINES))
def engines(session: nox.Session, backend: str) -> None:
    """An adapter's tests and its engine's jobs, in the engine's own venv (ENGINES).

    deepspeed: DeepSpeed's CPU accelerator on 2 CPU processes (gloo); xla: XLA's CPU device
    (PJRT_DEVICE=CPU), with torch and torch_xla 2.9.0.
    """
    env = install_engine(session, ENGINES[backend])
    session.run("pip", "check")
    tests = (str(path) for path in ENGINES[backend].tests)
    session.run("pytest", "-q", "-p", "no:cacheprovider", *tests, *session.posargs, env={**TEST_ENV, **env})


@nox.session
def trackers(session: nox.Session) -> None:
    """Every library tracker against its real library, offline (integration-tests/trackers): W&B,
    MLflow (SQLite store), Aim, Comet, ClearML, DVCLive, SwanLab and Trackio each log a run that
    the library's own reader must give back; MLflow also on 2 launched ranks. About 4 minutes on
    2 cores, most of it installing.

    Not in the default sessions: CI runs it in its second call, beside `engines`. No test reaches
    the network (offline modes, and a socket guard that refuses anything not local). Every tracker
    of Accelerate's `LoggerType` is covered; none had to be left out.
    """
    install_packages(session, *PACKAGES, extra="test", beside=TRACKER_LIBRARIES)
    session.run("pip", "check")
    session.run("pytest", "-q", "-p", "no:cacheprovider", str(TRACKER_TESTS), *session.posargs, env=TEST_ENV)


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
        *_ignored_engine_tests(EXAMPLE_TESTS),
        *session.posargs,
        env=TEST_ENV,
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Head to head: raw PyTorch vs accel vs Accelerate, every figure in one run (`python -m benchmarks`);
    table on stdout, JSON and plots in benchmarks/results, benchmarks/README.md regenerated.

    Arguments after `--` go to the runner: `nox -s bench -- --quick`,
    `-- --only training --rounds 7 --output benchmarks/results/training`.
    """
    # Accelerate is the contender, pinned to the version the targets were set against; matplotlib draws.
    share_torch(session)
    session.install("-c", CONSTRAINTS, DEEPSPEED, "accelerate==1.15.0", "matplotlib")
    install_packages(session, *PACKAGES, ENGINES["deepspeed"].adapter)
    session.run("python", "-m", "benchmarks", *session.posargs, env={"OMP_NUM_THREADS": "1"})


@nox.session
@nox.parametrize("backend", list(ENGINES))
def bench_engines(session: nox.Session, backend: str) -> None:
    """An engine's benchmark figures, accel vs the engine driven by hand, in the engine's venv.

    deepspeed: the `engines` figure (ZeRO-2 and FSDP2); xla: the `xla` figure, which needs torch 2.9.0
    and so cannot run in `bench`'s venv. The venv is installed as the `engines` session's; results and
    their README go to benchmarks/results/<backend>/.

    Arguments after `--` go to the runner: `nox -s "bench_engines(backend='xla')" -- --quick`.
    """
    engine = ENGINES[backend]
    env = install_engine(session, engine)
    output = str(ROOT / "benchmarks" / "results" / backend)
    session.run("python", "-m", "benchmarks", "--only", engine.figures, "--output", output, *session.posargs,
                env={"OMP_NUM_THREADS": "1", **env})  # fmt: skip


# Ray Train at the version its tests were checked with (Python 3.11, torch 2.13.0 CPU).
RAY_LIBRARIES = ("ray[train]==2.60.0",)
RAY_TESTS = INTEGRATION_TESTS / "ray"


@nox.session
def ray(session: nox.Session) -> None:
    """An accel training function under Ray Train's TorchTrainer (integration-tests/ray): 2 CPU workers
    on a local Ray cluster bound to the loopback, the Accelerator adopting Ray's process group, the
    same weights as `accel launch`, `save_state` into Ray's checkpoint and a resume from it, and
    examples/ray_train.py.

    Not in the default sessions (Ray is a large install); without Ray the folder's tests skip.
    """
    install_packages(session, *PACKAGES, extra="test", beside=RAY_LIBRARIES)
    session.run("pip", "check")
    session.run("pytest", "-q", "-p", "no:cacheprovider", str(RAY_TESTS), *session.posargs, env=TEST_ENV)


# A real one-node SLURM on loopback (Debian's packages; the tests start and stop its daemons).
SLURM_PACKAGES = ("slurm-wlm", "munge")
SLURM_TESTS = INTEGRATION_TESTS / "slurm"


@nox.session
def slurm(session: nox.Session) -> None:
    """accel jobs under a real SLURM (integration-tests/slurm): munged, slurmctld and slurmd run as a
    one-node cluster on loopback for the test run; `srun -n 2 python train.py`, `sbatch` of
    examples/slurm/train.sbatch and `accel launch` inside an allocation end with the weights of
    `accel launch`, and a task killed mid-training fails the job naming its rank.

    Not in the default sessions: it installs Debian's slurm-wlm and munge with apt-get when
    `slurmctld` is missing (CI runs as root on Debian), and starts daemons.
    """
    import shutil
    import subprocess

    install_packages(session, *PACKAGES, extra="test")
    session.run("pip", "check")
    if shutil.which("slurmctld") is None:
        apt_env = {"DEBIAN_FRONTEND": "noninteractive"}
        known = subprocess.run(["apt-cache", "show", *SLURM_PACKAGES], capture_output=True, check=False)
        if known.returncode != 0:  # no package lists yet (a fresh container)
            session.run("apt-get", "update", "-q", external=True, env=apt_env)
        session.run("apt-get", "install", "-y", "-q", *SLURM_PACKAGES, external=True, env=apt_env)
    session.run("pytest", "-q", "-p", "no:cacheprovider", str(SLURM_TESTS), *session.posargs, env=TEST_ENV)
