"""Fetch the wheels the services need on the device machine into `.whl/`.

The device image has torch, Triton and a large scientific stack but not every dependency of the
services, and no network. This walks widebeam's declared runtime dependencies (and theirs) as
installed in this environment, leaves out what the image already holds in a build of its own,
and downloads each of the rest at the version installed here, built for the device's Python
(no resolution: the closure is already resolved here).

    .venv/bin/python bench/device_wheels.py [--python-version 3.12] [--dest .whl]

On the device: `pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and
`export PYTHONPATH=/tmp/site`.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import subprocess
import sys

from packaging.requirements import Requirement

# On the device image (the device tool's KINDS.md lists its packages), in builds matched to its
# CUDA or too large to carry (the carried tree holds 64 MiB): a copy from here would shadow them.
ON_THE_IMAGE = frozenset({
    "torch", "triton", "numpy", "pyarrow", "tokenizers", "safetensors", "tqdm", "setuptools",
    "pip", "packaging", "pyyaml", "pygments", "rich",
})  # fmt: skip
# Bench tools the device runs that the services do not need (stack.py --profile).
BENCH_TOOLS = {"py-spy": "0.4.3"}
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def on_the_image(name: str) -> bool:
    return _key(name) in ON_THE_IMAGE or _key(name).startswith("nvidia-")


def runtime_closure(root: str = "widebeam") -> dict[str, str]:
    """Distribution -> installed version for every runtime dependency of `root`, transitively,
    with the extras the requirements name and markers evaluated for this interpreter; what the
    image holds is left out with its own dependencies (the image has those too)."""
    found: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (_key(name), extras) in seen or (name != root and on_the_image(name)):
            continue
        seen.add((_key(name), extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a dependency of an extra this environment did not install
        if name != root:
            found[dist.metadata["Name"]] = dist.version
        for text in dist.requires or ():
            req = Requirement(text)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--python-version", default="3.12", help="the device's Python")
    parser.add_argument("--dest", default=".whl")
    args = parser.parse_args()
    pins = sorted(f"{d}=={v}" for d, v in (runtime_closure() | BENCH_TOOLS).items())
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [
        sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps",
        "--implementation", "cp", "--python-version", args.python_version, *platforms,
        "-d", args.dest, *pins,
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    print(f"{len(pins)} wheels in {args.dest}: {' '.join(pins)}")


if __name__ == "__main__":
    main()
