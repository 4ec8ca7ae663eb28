"""deploy/Dockerfile.cuda's Python layers, built for real on the CPU image's base (`make
compose-test`; marker `docker`, skipped where no Docker daemon answers). Its own base,
nvidia/cuda, cannot be pulled here, so `CUDA_IMAGE` is the CPU base, `PYTHON` that base's
Python and torch the CPU wheel: what is checked is everything but CUDA itself (the venv, the
`gpu` extra with Triton, the package's imports, the final stage's user and entrypoint)."""

from __future__ import annotations

import pytest

from tests.deploy.compose_stack import build_images, docker, docker_answers
from tests.deploy.helpers import DOCKERFILES, ROOT

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(docker_answers() is not None, reason=f"needs Docker: {docker_answers()}"),
]
IMAGE = "widebeam-test/cuda-layers:cpu-base"


def test_cuda_dockerfile_builds_on_the_cpu_base() -> None:
    settings = build_images()  # the base image and torch index this machine can use
    python = docker("run", "--rm", "--entrypoint", "sh", settings["PYTHON_IMAGE"], "-c",
                    "ls /usr/bin | grep -E '^python3\\.[0-9]+$' | sort -V | tail -n1")  # fmt: skip
    args = ["build", "-q", "-f", str(DOCKERFILES["cuda"]), "-t", IMAGE,
            "--build-arg", f"CUDA_IMAGE={settings['PYTHON_IMAGE']}",
            "--build-arg", f"PYTHON={python.strip()}",
            "--build-arg", f"TORCH_INDEX_URL={settings['TORCH_INDEX_URL']}"]  # fmt: skip
    if settings.get("CA_BUNDLE"):
        args += ["--secret", f"id=ca_bundle,src={settings['CA_BUNDLE']}"]
    try:
        docker(*args, str(ROOT), timeout=3600)
        assert docker("run", "--rm", IMAGE, "--help").startswith("usage: widebeam")
        user = docker("run", "--rm", "--entrypoint", "id", IMAGE, "-u").strip()
        assert user == "10001"
        docker(
            "run", "--rm", "--entrypoint", "python", IMAGE, "-c", "import triton, widebeam.kernels"
        )
    finally:
        docker("image", "rm", "-f", IMAGE, check=False)
