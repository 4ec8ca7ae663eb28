"""docker-compose.yml, deploy/compose.cpu.yml and .env.example: schema, healthchecks, start
order, users, grace periods, GPU reservation, documented settings. No Docker needed."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.helpers import (
    COMPOSE,
    COMPOSE_CPU,
    DOCKERFILES,
    ENV_EXAMPLE,
    OTHER_WIDEBEAM_VARIABLES,
    ROOT,
    compose_services,
    duration_seconds,
    image_ref,
    load_compose,
    parse_dockerfile,
    pyproject_version,
    settings_variables,
    tool,
)

CORE = ("redis", "catalog", "decoder", "gateway", "worker")
WIDEBEAM_SERVICES = ("catalog", "decoder", "gateway", "worker")
PROFILES = {
    "flower": ["flower"],
    "prometheus": ["monitoring"],
    "grafana": ["monitoring"],
    "redis-exporter": ["monitoring"],
}


def _check_jsonschema() -> str:
    exe = tool("check-jsonschema")
    if exe is None:
        pytest.skip(
            "check-jsonschema is not installed: add `check-jsonschema` to the dev dependencies "
            "(pip install check-jsonschema)"
        )
    return exe


def _validate(exe: str, path: Path) -> None:
    result = subprocess.run(
        [exe, "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"{path.name}:\n{result.stdout}{result.stderr}"


def test_compose_file_validates_against_the_compose_spec() -> None:
    _validate(_check_jsonschema(), COMPOSE)


def test_cpu_override_validates_against_the_compose_spec(tmp_path: Path) -> None:
    # check-jsonschema's YAML reader rejects Compose's `!reset` tag: validate the same
    # document as JSON, with `!reset` read as null (what Compose's merge starts from).
    exe = _check_jsonschema()
    converted = tmp_path / "compose.cpu.json"
    converted.write_text(json.dumps(load_compose(COMPOSE_CPU)))
    _validate(exe, converted)


def test_core_services_and_profiles() -> None:
    services = compose_services()
    for name in CORE:
        assert name in services, f"missing service {name}"
        assert "profiles" not in services[name], f"{name} must start by default"
    for name, profiles in PROFILES.items():
        assert services[name].get("profiles") == profiles, name


@pytest.mark.parametrize("name", sorted(load_compose()["services"]))
def test_every_service_has_a_healthcheck(name: str) -> None:
    check = compose_services()[name].get("healthcheck")
    assert check, f"{name}: no healthcheck"
    assert not check.get("disable"), f"{name}: healthcheck disabled"
    test = check["test"]
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), f"{name}: {test}"
    for key in ("interval", "timeout", "start_period"):
        duration_seconds(check[key])  # present and well-formed


def test_widebeam_services_use_the_image_probe() -> None:
    services = compose_services()
    for name in WIDEBEAM_SERVICES:
        assert services[name]["healthcheck"]["test"] == ["CMD", "widebeam-healthcheck", name]


def _references(service: dict[str, Any]) -> str:
    """The text through which a service addresses others: environment and command."""
    parts: list[str] = []
    env = service.get("environment") or {}
    parts += [str(v) for v in (env.values() if isinstance(env, dict) else env)]
    command = service.get("command") or []
    parts += command if isinstance(command, list) else [command]
    return "\n".join(parts)


@pytest.mark.parametrize("name", sorted(load_compose()["services"]))
def test_depends_on_waits_for_healthy_dependencies(name: str) -> None:
    services = compose_services()
    service = services[name]
    depends = service.get("depends_on") or {}
    assert isinstance(depends, dict), f"{name}: use the long depends_on syntax (with condition)"
    for target, spec in depends.items():
        assert target in services, f"{name} depends on unknown {target}"
        assert spec.get("condition") == "service_healthy", f"{name} -> {target}: {spec}"
    text = re.sub(r"\$\{\w+:?-", " ", _references(service))  # ${VAR:-default} -> default
    for other in services:
        if other != name and re.search(rf"(?<![\w-]){re.escape(other)}:\d+", text):
            assert other in depends, f"{name} uses {other} but does not wait for it"


def test_start_order_of_the_core_services() -> None:
    services = compose_services()
    assert set(services["catalog"]["depends_on"]) == {"redis"}
    assert set(services["decoder"]["depends_on"]) == {"redis"}
    assert set(services["gateway"]["depends_on"]) >= {"redis", "decoder"}
    assert set(services["worker"]["depends_on"]) >= {"redis", "decoder"}


@pytest.mark.parametrize("name", sorted(load_compose()["services"]))
def test_services_run_as_non_root_and_restart(name: str) -> None:
    service = compose_services()[name]
    user = str(service.get("user", ""))
    assert user, f"{name}: no explicit user"
    assert user.split(":")[0] not in ("root", "0"), f"{name}: runs as {user}"
    assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name


def test_widebeam_user_is_the_images_user() -> None:
    services = compose_services()
    for variant, path in DOCKERFILES.items():
        users = parse_dockerfile(path).stages[-1].args_of("USER")
        for name in WIDEBEAM_SERVICES:
            assert services[name]["user"] == users[-1], f"{name} vs {variant} image"


def test_images_are_the_ones_the_dockerfiles_build() -> None:
    services = compose_services()
    version = pyproject_version()
    for name in WIDEBEAM_SERVICES:
        variant = "cuda" if name == "decoder" else "cpu"
        service = services[name]
        image = service["image"].replace("${WIDEBEAM_VERSION:-" + version + "}", version)
        assert image == image_ref(variant), f"{name}: {service['image']}"
        dockerfile = ROOT / service["build"]["context"] / service["build"]["dockerfile"]
        assert dockerfile == DOCKERFILES[variant]


def test_decoder_reserves_one_gpu_and_the_cpu_override_removes_it() -> None:
    decoder = compose_services()["decoder"]
    devices = decoder["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert decoder["environment"]["WIDEBEAM_DECODER_DEVICE"] == "cuda"

    override = load_compose(COMPOSE_CPU)["services"]
    assert set(override) == {"decoder"}
    cpu = override["decoder"]
    assert cpu["deploy"] is None  # `!reset`
    assert cpu["environment"] == {
        "WIDEBEAM_DECODER_DEVICE": "cpu",
        "WIDEBEAM_DECODER_DTYPE": "float32",
    }
    version = pyproject_version()
    image = cpu["image"].replace("${WIDEBEAM_VERSION:-" + version + "}", version)
    assert image == image_ref("cpu")
    assert ROOT / cpu["build"]["dockerfile"] == DOCKERFILES["cpu"]
    assert "!reset" in COMPOSE_CPU.read_text()


def test_model_directory_is_mounted_read_only() -> None:
    services = compose_services()
    for name in ("decoder", "gateway", "catalog"):
        mounts = [m for m in services[name]["volumes"] if isinstance(m, dict)]
        model = [m for m in mounts if m["target"] == "/models/model"]
        assert model and model[0]["read_only"] is True, name
        assert model[0]["source"].startswith("${MODEL_DIR"), name
    assert services["decoder"]["environment"]["WIDEBEAM_DECODER_MODEL"] == "/models/model"


def test_redis_persists_append_only_to_a_volume() -> None:
    redis = compose_services()["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command
    assert "redis-data:/data" in redis["volumes"]
    assert "redis-data" in load_compose()["volumes"]


def test_grace_periods_cover_the_services_shutdown() -> None:
    from widebeam.services.decoder.server.settings import DecoderSettings
    from widebeam.services.gateway.batch.celery_app import create_celery
    from widebeam.services.gateway.batch.settings import BatchSettings
    from widebeam.services.gateway.settings import GatewaySettings

    services = compose_services()
    worker = duration_seconds(services["worker"]["stop_grace_period"])
    # Celery's soft shutdown (0 = off: a warm shutdown just finishes the running chunk).
    soft = float(create_celery(BatchSettings()).conf.worker_soft_shutdown_timeout or 0)
    assert worker > soft + 30 and worker >= 60, f"worker stop_grace_period {worker}s"
    decoder = duration_seconds(services["decoder"]["stop_grace_period"])
    assert decoder > DecoderSettings.model_fields["grace_period_s"].default
    gateway = duration_seconds(services["gateway"]["stop_grace_period"])
    assert gateway > GatewaySettings.model_fields["request_timeout_s"].default


def test_ports_match_the_services_defaults() -> None:
    services = compose_services()
    assert services["gateway"]["environment"]["WIDEBEAM_GATEWAY_PORT"] == "8000"
    assert services["catalog"]["environment"]["WIDEBEAM_CATALOG_PORT"] == "8300"
    assert services["decoder"]["environment"]["WIDEBEAM_DECODER_PORT"] == "50051"
    assert services["gateway"]["ports"][0].endswith(":8000")
    assert services["catalog"]["ports"][0].endswith(":8300")
    assert "ports" not in services["decoder"] and "ports" not in services["redis"]


def test_monitoring_files_mounted_from_the_repository_exist() -> None:
    services = compose_services()
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source} missing"


# ---------------------------------------------------------------------------- .env.example

_INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)")


def _env_example() -> tuple[dict[str, str], set[str]]:
    """(uncommented VAR=value lines, every VAR named anywhere in the file)."""
    text = ENV_EXAMPLE.read_text()
    assigned = dict(re.findall(r"^([A-Z_][A-Z0-9_]*)=(.*)$", text, flags=re.MULTILINE))
    named = set(re.findall(r"\b([A-Z][A-Z0-9_]*[A-Z0-9])\b", text))
    return assigned, named


def test_env_example_documents_every_compose_variable() -> None:
    assigned, _ = _env_example()
    used = set()
    for path in (COMPOSE, COMPOSE_CPU):
        used |= set(_INTERPOLATION.findall(path.read_text()))
    assert used, "no ${...} found"
    missing = sorted(v for v in used if v not in assigned)
    assert not missing, f"compose variables without a line in .env.example: {missing}"


def test_env_example_documents_every_service_setting() -> None:
    _, named = _env_example()
    missing = sorted(settings_variables() - named)
    assert not missing, f"settings not mentioned in .env.example: {missing}"


def test_env_example_names_only_real_settings() -> None:
    _, named = _env_example()
    known = settings_variables() | OTHER_WIDEBEAM_VARIABLES
    unknown = sorted(n for n in named if n.startswith("WIDEBEAM_") and n not in known)
    assert not unknown, f"no service reads these: {unknown}"


def test_env_example_sets_no_empty_service_setting() -> None:
    assigned, _ = _env_example()
    empty = [k for k, v in assigned.items() if k.startswith("WIDEBEAM_") and not v.strip()]
    assert not empty, f"an empty value is a value (e.g. an empty API key): {empty}"
    secrets = [k for k in assigned if "API_KEY" in k]
    assert not secrets, f"API keys must stay commented out in the example: {secrets}"


def test_compose_environment_names_only_real_settings() -> None:
    known = settings_variables() | OTHER_WIDEBEAM_VARIABLES
    for path in (COMPOSE, COMPOSE_CPU):
        for name, service in load_compose(path)["services"].items():
            for key in service.get("environment") or {}:
                if key.startswith("WIDEBEAM_"):
                    assert key in known, f"{path.name}: {name}: no service reads {key}"
