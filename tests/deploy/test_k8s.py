"""deploy/k8s: manifests parse (and validate, with kubernetes-validate), reference the images
the Dockerfiles build, container ports have Services, probes, GPUs, HPA, security."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import (
    K8S,
    OTHER_WIDEBEAM_VARIABLES,
    SERVICE_PORTS,
    compose_services,
    duration_seconds,
    image_ref,
    k8s_objects,
    load_k8s,
    pod_spec,
    settings_variables,
    tool,
)

WORKLOAD_KINDS = ("Deployment", "StatefulSet")


def _workloads() -> list[dict[str, Any]]:
    return [doc for _, doc in load_k8s() if doc.get("kind") in WORKLOAD_KINDS]


def _workload(name: str) -> dict[str, Any]:
    found = [w for w in _workloads() if w["metadata"]["name"] == name]
    assert len(found) == 1, name
    return found[0]


def _container(name: str) -> dict[str, Any]:
    return pod_spec(_workload(name))["containers"][0]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def test_manifests_parse_and_are_complete() -> None:
    docs = load_k8s()
    assert docs
    for path, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), path.name
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"], path.name


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == files - {"secret.example.yaml"}
    assert kustomization["namespace"] == "widebeam"


def test_manifests_validate_against_the_kubernetes_schemas() -> None:
    exe = tool("kubernetes-validate")
    if exe is None:
        pytest.skip("kubernetes-validate is not installed (pip install kubernetes-validate)")
    files = [str(p) for p in sorted(K8S.glob("*.yaml")) if p.name != "kustomization.yaml"]
    result = subprocess.run(
        [exe, "--strict", "--quiet", *files], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_images_are_the_ones_the_dockerfiles_build() -> None:
    built = {image_ref("cpu"), image_ref("cuda")}
    redis_image = compose_services()["redis"]["image"]
    for workload in _workloads():
        for container in pod_spec(workload)["containers"]:
            image = container["image"]
            if workload["metadata"]["name"] == "widebeam-redis":
                assert image == redis_image, "redis image differs from docker-compose.yml"
            else:
                assert image in built, f"{workload['metadata']['name']}: {image}"
    assert _container("widebeam-decoder")["image"] == image_ref("cuda")
    for name in ("widebeam-gateway", "widebeam-catalog", "widebeam-worker"):
        assert _container(name)["image"] == image_ref("cpu"), name


def _selects(service: dict[str, Any], workload: dict[str, Any]) -> bool:
    selector = service["spec"].get("selector") or {}
    labels = workload["spec"]["template"]["metadata"]["labels"]
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _port_matches(target: int | str, port: dict[str, Any]) -> bool:
    return target == port.get("name") or target == port["containerPort"]


def test_every_container_port_is_served_by_a_service() -> None:
    services = k8s_objects("Service")
    for workload in _workloads():
        name = workload["metadata"]["name"]
        ports = [p for c in pod_spec(workload)["containers"] for p in c.get("ports", [])]
        if not ports:
            continue
        selecting = [s for s in services if _selects(s, workload)]
        assert selecting, f"{name}: no Service selects its pods"
        targets = [sp.get("targetPort", sp["port"]) for s in selecting for sp in s["spec"]["ports"]]
        for port in ports:
            assert any(_port_matches(t, port) for t in targets), f"{name}: {port} unserved"
        if workload["kind"] == "StatefulSet":
            governing = workload["spec"]["serviceName"]
            (headless,) = [s for s in selecting if s["metadata"]["name"] == governing]
            assert headless["spec"].get("clusterIP") == "None", name


def test_every_service_targets_a_container_port() -> None:
    for service in k8s_objects("Service"):
        selected = [w for w in _workloads() if _selects(service, w)]
        assert selected, f"Service {service['metadata']['name']} selects no workload"
        ports = [p for w in selected for c in pod_spec(w)["containers"] for p in c.get("ports", [])]
        for sp in service["spec"]["ports"]:
            target = sp.get("targetPort", sp["port"])
            assert any(_port_matches(target, p) for p in ports), (service["metadata"]["name"], sp)


def test_widebeam_ports_are_the_services_defaults() -> None:
    for service, port in SERVICE_PORTS.items():
        container = _container(f"widebeam-{service}")
        assert [p["containerPort"] for p in container["ports"]] == [port], service
        assert _env(container)[f"WIDEBEAM_{service.upper()}_PORT"]["value"] == str(port)
        assert _env(container)[f"WIDEBEAM_{service.upper()}_HOST"]["value"] == "0.0.0.0"


def test_decoder_one_gpu_per_pod_with_grpc_probes() -> None:
    decoder = _workload("widebeam-decoder")
    container = _container("widebeam-decoder")
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert resources["requests"]["nvidia.com/gpu"] == 1
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == SERVICE_PORTS["decoder"], probe
    assert container["readinessProbe"]["grpc"]["service"] == "widebeam.decoder.v1.Decoder"
    assert _env(container)["WIDEBEAM_DECODER_DEVICE"]["value"] == "cuda"
    assert decoder["spec"]["podManagementPolicy"] == "Parallel"


def test_decoder_addresses_list_the_decoder_pods() -> None:
    decoder = _workload("widebeam-decoder")
    replicas = decoder["spec"]["replicas"]
    service = decoder["spec"]["serviceName"]
    expected = [
        f"{decoder['metadata']['name']}-{i}.{service}:{SERVICE_PORTS['decoder']}"
        for i in range(replicas)
    ]
    data = k8s_objects("ConfigMap")[0]["data"]
    for key in ("WIDEBEAM_GATEWAY_DECODERS", "WIDEBEAM_BATCH_DECODER_ADDRESSES"):
        assert data[key].split(",") == expected, key


def test_gateway_autoscales_on_cpu() -> None:
    (hpa,) = k8s_objects("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "widebeam-gateway")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert "replicas" not in _workload("widebeam-gateway")["spec"], "the HPA owns replicas"
    assert _container("widebeam-gateway")["resources"]["requests"]["cpu"]
    probes = _container("widebeam-gateway")
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_worker_grace_period_matches_compose() -> None:
    worker = pod_spec(_workload("widebeam-worker"))
    compose = duration_seconds(compose_services()["worker"]["stop_grace_period"])
    assert worker["terminationGracePeriodSeconds"] >= compose


@pytest.mark.parametrize("name", ["widebeam-decoder", "widebeam-gateway", "widebeam-catalog"])
def test_model_volume_is_read_only(name: str) -> None:
    spec = pod_spec(_workload(name))
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert claims["models"]["claimName"] == "widebeam-models"
    assert claims["models"]["readOnly"] is True and mounts["models"]["readOnly"] is True
    (pvc,) = k8s_objects("PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "widebeam-models"
    assert pvc["spec"]["accessModes"] == ["ReadOnlyMany"]


def test_pods_run_as_non_root_without_service_links() -> None:
    for workload in _workloads():
        name = workload["metadata"]["name"]
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["runAsUser"] != 0, name
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
        if name != "widebeam-redis":
            # Service links would inject e.g. WIDEBEAM_GATEWAY_PORT=tcp://..., which the
            # gateway's settings would read as its port.
            assert spec["enableServiceLinks"] is False, name
            assert spec["securityContext"]["runAsUser"] == 10001, name


def test_referenced_secrets_configmaps_and_claims_exist() -> None:
    example = yaml.safe_load((K8S / "secret.example.yaml").read_text())
    secret_keys = set(example["stringData"])
    configmaps = {c["metadata"]["name"] for c in k8s_objects("ConfigMap")}
    claims = {c["metadata"]["name"] for c in k8s_objects("PersistentVolumeClaim")}
    for workload in _workloads():
        spec = pod_spec(workload)
        for container in spec["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == example["metadata"]["name"]
                    assert ref["key"] in secret_keys, ref
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in configmaps
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_settings_variables_are_real() -> None:
    known = settings_variables() | OTHER_WIDEBEAM_VARIABLES
    names = set()
    for config in k8s_objects("ConfigMap"):
        names |= set(config["data"])
    for workload in _workloads():
        for container in pod_spec(workload)["containers"]:
            names |= {e["name"] for e in container.get("env", [])}
    unknown = sorted(n for n in names if n.startswith("WIDEBEAM_") and n not in known)
    assert not unknown, f"no service reads these: {unknown}"


def test_redis_persists_append_only() -> None:
    redis = _workload("widebeam-redis")
    args = _container("widebeam-redis")["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    secret_url = yaml.safe_load((K8S / "secret.example.yaml").read_text())["stringData"]
    assert re.fullmatch(r"rediss?://:[^@]+@widebeam-redis:6379/0", secret_url["redis-url"])
