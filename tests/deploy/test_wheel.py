"""The sdist and wheel of `python -m build`, installed outside the checkout and run from there.

The checkout's package files (tracked and untracked-but-not-ignored, as `git ls-files` lists
them) are copied to a temporary folder, so the build cannot read stale egg-info or caches of
the working tree. `python -m build` makes the sdist and builds the wheel from it (so the sdist
is checked too). The wheel goes into a fresh venv outside the checkout with `--no-deps`; the
runtime dependencies come from this test's own environment through a `.pth` line naming its
site-packages (a plain path line: the editable install's finder in there is not activated), so
nothing is downloaded and `widebeam` resolves to the wheel's copy, which the test asserts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.deploy.helpers import ROOT, pyproject_version

# Top-level source folders and the import package each one becomes (setup.py's mapping).
PACKAGE_ROOTS = {
    "widebeam": "widebeam",
    "services": "widebeam.services",
}
PACKAGE_DATA_SUFFIXES = (".html", ".js", ".css", ".proto", ".pyi")


def _source_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the files to build are the ones git lists)")
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("source")
    for name in _source_files():
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return tree


@pytest.fixture(scope="module")
def dist(source_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` (sdist, then the wheel from it); no isolation: this environment
    already has the build backend, so nothing is downloaded."""
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source_tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _wheel(dist: Path) -> Path:
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout holding the wheel; returns its bin folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "_widebeam_test_dependencies.pth").write_text(
        sysconfig.get_path("purelib") + "\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--no-compile",
            "-q",
            str(_wheel(dist)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return env_dir / "bin"


def _outside_env(cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "WIDEBEAM_"))}
    env["HOME"] = str(cwd)
    env["XDG_CACHE_HOME"] = str(cwd / "cache")
    return env


def _run(bin_dir: Path, cwd: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [str(bin_dir / "widebeam"), *args],
        cwd=cwd,
        env=_outside_env(cwd),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"widebeam {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _expected_packages(source_tree: Path) -> set[str]:
    packages = set()
    for folder, package in PACKAGE_ROOTS.items():
        for init in (source_tree / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(source_tree / folder).parts
            packages.add(".".join((package, *relative)))
    return packages


def test_sdist_and_wheel_are_built(dist: Path) -> None:
    version = pyproject_version()
    assert sorted(p.name for p in dist.iterdir()) == [
        f"widebeam-{version}-py3-none-any.whl",
        f"widebeam-{version}.tar.gz",
    ]


def test_wheel_holds_every_package_and_its_data_and_nothing_else(
    dist: Path, source_tree: Path
) -> None:
    names = zipfile.ZipFile(_wheel(dist)).namelist()
    top_levels = {name.split("/")[0] for name in names}
    assert top_levels == {"widebeam", f"widebeam-{pyproject_version()}.dist-info"}, top_levels
    packaged = {
        name.rsplit("/", 1)[0].replace("/", ".") for name in names if name.endswith("/__init__.py")
    }
    missing = _expected_packages(source_tree) - packaged
    assert not missing, f"subpackages missing from the wheel: {sorted(missing)}"
    # Every module and every package data file of the sources is in the wheel, at its place.
    for folder, package in PACKAGE_ROOTS.items():
        for path in (source_tree / folder).rglob("*"):
            if path.suffix in (".py", *PACKAGE_DATA_SUFFIXES) and path.is_file():
                relative = path.relative_to(source_tree / folder).as_posix()
                wheel_name = "/".join((*package.split("."), relative))
                assert wheel_name in names, f"{folder}/{relative} is not in the wheel"
    for required in (
        "widebeam/services/decoder/proto/widebeam/decoder/v1/decoder_pb2.py",
        "widebeam/services/decoder/proto/widebeam/decoder/v1/decoder_pb2_grpc.py",
        "widebeam/services/decoder/proto/widebeam/decoder/v1/decoder.proto",
        "widebeam/services/gateway/playground/index.html",
        "widebeam/kernels/__init__.py",
    ):
        assert required in names, required
    assert not [
        n for n in names if "/tests/" in n or "/bench/" in n or n.startswith(("tests/", "bench/"))
    ]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_installed_wheel_runs_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "import widebeam, widebeam.kernels;"
            " import widebeam.services.decoder.proto.widebeam.decoder.v1.decoder_pb2 as pb;"
            " print(widebeam.__file__); print(pb.__file__)",
        ],
        cwd=tmp_path,
        env=_outside_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for path in where:
        assert Path(path).is_relative_to(installed.parent), path
        assert not Path(path).resolve().is_relative_to(ROOT), path

    assert "generate" in _run(installed, tmp_path, "--help")

    out = _run(installed, tmp_path, "demo", "build", "--tiny", "--out", "demo", "--no-progress")
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    model, catalog = Path(tmp_path, fields["model"]), Path(tmp_path, fields["catalog"])
    assert (model / "config.json").is_file() and catalog.is_file()

    request = {"id": "r", "input_ids": [1, 2], "beam_width": 4, "n": 2, "constrained": True}
    generated = _run(
        installed,
        tmp_path,
        "generate",
        "--model",
        str(model),
        "--catalog",
        str(catalog),
        stdin=json.dumps(request) + "\n",
    )
    [row] = [json.loads(line) for line in generated.splitlines()]
    assert row["id"] == "r" and "error" not in row, row
    assert len(row["beams"]) == 2 and all(beam["item_ids"] for beam in row["beams"]), row
