"""Shared helpers of the deployment tests: paths, YAML loading (with Compose's merge tags),
Dockerfile parsing, the metric names the code exports, the service settings' variables."""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
MONITORING = DEPLOY / "monitoring"
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_CPU = DEPLOY / "compose.cpu.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCKERFILES = {"cpu": DEPLOY / "Dockerfile.cpu", "cuda": DEPLOY / "Dockerfile.cuda"}

# Container ports of the services (their settings' defaults; checked against them in tests).
SERVICE_PORTS = {"gateway": 8000, "catalog": 8300, "decoder": 50051}


def tool(name: str) -> str | None:
    """An executable from this virtualenv, else from PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    return shutil.which(name)


# ---------------------------------------------------------------------------------- YAML


class _ComposeLoader(yaml.SafeLoader):
    """SafeLoader that reads Compose's `!reset` (→ None) and `!override` (→ the value)."""


def _reset(loader: yaml.SafeLoader, node: yaml.Node) -> None:
    return None


def _override(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_ComposeLoader.add_constructor("!reset", _reset)
_ComposeLoader.add_constructor("!override", _override)


@cache
def load_compose(path: Path = COMPOSE) -> dict[str, Any]:
    """The parsed file (cached: treat it as read-only)."""
    data = yaml.load(path.read_text(), Loader=_ComposeLoader)  # a SafeLoader subclass
    assert isinstance(data, dict), f"{path}: not a mapping"
    return data


def compose_services() -> dict[str, dict[str, Any]]:
    return load_compose()["services"]


@cache
def load_k8s() -> list[tuple[Path, dict[str, Any]]]:
    """Every document of every manifest in deploy/k8s, with its file (cached: read-only)."""
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path, doc))
    return docs


def k8s_objects(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in load_k8s() if doc.get("kind") == kind]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


# ---------------------------------------------------------------------------- Dockerfiles


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)  # (INSTRUCTION, args)

    def args_of(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def arg_default(self, name: str) -> str | None:
        if name in self.global_args:
            return self.global_args[name]
        for stage in self.stages:
            for args in stage.args_of("ARG"):
                key, _, value = args.partition("=")
                if key.strip() == name:
                    return value.strip().strip('"') or None
        return None


def parse_dockerfile(path: Path) -> Dockerfile:
    """Instructions with continuation lines joined and comments dropped."""
    logical: list[str] = []
    buffer = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        logical.append(buffer + line)
        buffer = ""
    if buffer:
        logical.append(buffer)
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        args = args.strip()
        if instruction == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif not stages:
            if instruction == "ARG":
                key, _, value = args.partition("=")
                global_args[key.strip()] = value.strip().strip('"')
        else:
            stages[-1].instructions.append((instruction, args))
    return Dockerfile(global_args, stages)


def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def image_ref(variant: str) -> str:
    """The image a Dockerfile builds, by its documented name: widebeam:<version>-<variant>."""
    dockerfile = parse_dockerfile(DOCKERFILES[variant])
    label = _label(dockerfile, "org.opencontainers.image.ref.name")
    version = dockerfile.arg_default("VERSION")
    assert label is not None and version is not None, f"{variant}: no ref.name label / VERSION"
    return label.replace("${VERSION}", version)


def _label(dockerfile: Dockerfile, key: str) -> str | None:
    final = dockerfile.stages[-1]
    for args in final.args_of("LABEL"):
        match = re.search(rf'{re.escape(key)}="([^"]*)"', args)
        if match:
            return match.group(1)
    return None


# -------------------------------------------------------------------------------- metrics

# Metrics of third-party exporters the dashboard may use (oliver006/redis_exporter).
REDIS_EXPORTER_METRICS = frozenset({"redis_up", "redis_key_size", "redis_memory_used_bytes"})
_PROMQL_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_METRIC_NAME = re.compile(r"\b((?:widebeam|redis)_[a-zA-Z0-9_]+)\b")


def promql_metrics(expr: str) -> set[str]:
    """Metric names in a PromQL expression (string literals such as label values removed)."""
    return set(_METRIC_NAME.findall(_PROMQL_STRING.sub('""', expr)))


@cache
def exported_series() -> frozenset[str]:
    """Series names the services export: every family of the gateway's and the catalog
    service's registries with its type's suffixes, plus any other `widebeam_*` family named
    in the sources (e.g. future batch metrics), with every suffix."""
    from widebeam.services.catalog.service.metrics import Metrics
    from widebeam.services.gateway.metrics import GatewayMetrics

    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
        "gauge": ("",),
        "info": ("_info",),
    }
    names: set[str] = set()
    families: set[str] = set()
    registries = [GatewayMetrics().registry, Metrics(lambda: {"default": 1}).registry]
    for registry in registries:
        for family in registry.collect():
            families.add(family.name)
            names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    for source in (ROOT / "services").rglob("*.py"):
        for family in re.findall(r'"(widebeam_[a-z0-9_]+)"', source.read_text()):
            if family not in families:
                names.update(family + s for s in ("", "_total", "_bucket", "_sum", "_count"))
    return frozenset(names)


# ------------------------------------------------------------------------------- settings


@cache
def settings_variables() -> frozenset[str]:
    """Every WIDEBEAM_<SERVICE>_* variable the four services' settings read, and the decoder
    clients' (gateway, worker: `WIDEBEAM_DECODER_CLIENT_TLS_*`, the shared token)."""
    from widebeam.services.catalog.service.settings import CatalogSettings
    from widebeam.services.decoder.security.client import DecoderClientSettings
    from widebeam.services.decoder.server.settings import DecoderSettings
    from widebeam.services.gateway.batch.settings import BatchSettings
    from widebeam.services.gateway.settings import GatewaySettings

    names = set()
    classes = (DecoderSettings, DecoderClientSettings, CatalogSettings, GatewaySettings,
               BatchSettings)  # fmt: skip
    for cls in classes:
        prefix = cls.model_config["env_prefix"]
        names.update(f"{prefix}{name}".upper() for name in cls.model_fields)
    return frozenset(names)


# WIDEBEAM_* variables read by something other than a service's settings class.
OTHER_WIDEBEAM_VARIABLES = frozenset(
    {
        "WIDEBEAM_VERSION",  # compose: image tag
        "WIDEBEAM_CATALOG_URL",  # `widebeam catalog upload` (client)
        "WIDEBEAM_API_KEY",  # `widebeam up`
    }
)


def duration_seconds(value: str | int | float) -> float:
    """A Compose duration (`1m30s`, `45s`, `2m`, `500ms`) in seconds."""
    if isinstance(value, int | float):
        return float(value)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"bad duration {value!r}"
    return sum(float(n) * units[u] for n, u in parts)
