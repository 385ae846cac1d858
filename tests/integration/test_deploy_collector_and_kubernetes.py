"""The shipped Collector configurations and Kubernetes manifests: pipelines, batches that fit
toolwatch's request limit, non-root bounded containers, probes, a valid configuration map,
and the memory sum the limits are sized from."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.integration.deploy_support import (
    DEFAULT_METRICS_PORT,
    DEPLOY,
    GATEWAY,
    GATEWAY_COLLECTOR,
    MONITORING,
    ROOT,
    SIDECAR,
    port_of,
    read_yaml,
    yaml_documents,
)
from toolwatch.config import AssemblySettings, Config, IngestSettings, load_config
from toolwatch.ingest.grpc_health import READ_TURNS
from toolwatch.references.settings import ShadowSettings
from toolwatch.references.shadow import PAIRED_ENTRY_BYTES

COLLECTOR = ROOT / "otel-collector.yaml"
DEFAULT_GRPC_LISTEN = "127.0.0.1:4317"


def _scrape_interval_seconds() -> float:
    """The longest scrape interval of the monitors in ``monitoring.yaml`` (``15s``)."""
    intervals = []
    for monitor in yaml_documents(MONITORING):
        if monitor["kind"].endswith("Monitor"):
            spec = monitor["spec"]
            for endpoint in spec.get("podMetricsEndpoints") or spec["endpoints"]:
                value = endpoint["interval"]
                assert value.endswith("s"), value
                intervals.append(float(value[:-1]))
    return max(intervals)


def _workloads(path: Path) -> list[dict[str, Any]]:
    kinds = {"Deployment", "StatefulSet", "DaemonSet"}
    return [doc for doc in yaml_documents(path) if doc["kind"] in kinds]


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", ()), *pod["containers"]]


def _toolwatch_container(workload: dict[str, Any]) -> dict[str, Any]:
    pod = workload["spec"]["template"]["spec"]
    (container,) = [c for c in _all_containers(pod) if c["name"] == "toolwatch"]
    return container


def _flag(container: dict[str, Any], flag: str) -> str | None:
    args = container.get("args", [])
    return args[args.index(flag) + 1] if flag in args else None


def _toolwatch_config_map(path: Path) -> str:
    (text,) = [
        str(doc["data"]["toolwatch.yaml"])
        for doc in yaml_documents(path)
        if doc["kind"] == "ConfigMap" and "toolwatch.yaml" in doc.get("data", {})
    ]
    return text


# --- collector configurations ---------------------------------------------------------------


def _check_pipeline_references(config: dict[str, Any]) -> dict[str, Any]:
    pipeline: dict[str, Any] = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"][0] == "memory_limiter" and "batch" in pipeline["processors"]
    for kind in ("receivers", "processors", "exporters"):
        assert set(pipeline[kind]) <= set(config[kind]), kind
    assert set(config["service"].get("extensions", [])) <= set(config.get("extensions", {}))
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    assert "otlp/backend" in pipeline["exporters"]
    return pipeline


def test_sidecar_collector_fans_out_to_backend_and_toolwatch() -> None:
    config = read_yaml(COLLECTOR)
    pipeline = _check_pipeline_references(config)
    assert "otlp/toolwatch" in pipeline["exporters"]
    exporter = config["exporters"]["otlp/toolwatch"]
    assert exporter["tls"]["insecure"] is True
    assert exporter["sending_queue"]["enabled"] and exporter["retry_on_failure"]["enabled"]


def test_sidecar_collector_sends_where_toolwatch_is_told_to_listen() -> None:
    endpoint = read_yaml(COLLECTOR)["exporters"]["otlp/toolwatch"]["endpoint"]
    host, _, port = endpoint.rpartition(":")
    assert host == "127.0.0.1"
    if endpoint != DEFAULT_GRPC_LISTEN:
        # The collector owns 4317 here, so toolwatch must be started on the documented port.
        assert port != "4317"
        flag = f"--grpc-listen {endpoint}"
        assert flag in COLLECTOR.read_text(encoding="utf-8")
        assert flag in (DEPLOY / "README.md").read_text(encoding="utf-8")


def test_gateway_collector_balances_by_trace_id_over_the_headless_service() -> None:
    config = read_yaml(GATEWAY_COLLECTOR)
    pipeline = _check_pipeline_references(config)
    assert "loadbalancing" in pipeline["exporters"]
    balancer = config["exporters"]["loadbalancing"]
    assert balancer["routing_key"] == "traceID"
    assert balancer["protocol"]["otlp"]["tls"]["insecure"] is True
    resolver = balancer["resolver"]["k8s"]
    (service,) = [
        d for d in yaml_documents(GATEWAY) if d["metadata"]["name"] == "toolwatch-headless"
    ]
    name, _, namespace = resolver["service"].partition(".")
    assert (name, namespace) == (service["metadata"]["name"], service["metadata"]["namespace"])
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    grpc_listen = _flag(_toolwatch_container(_workloads(GATEWAY)[0]), "--grpc-listen")
    assert resolver["ports"] == [ports["otlp-grpc"]] == [port_of(grpc_listen or "")]


# A request over ingest.max_request_bytes is lost: over gRPC, refused RESOURCE_EXHAUSTED,
# which exporters do not retry. A Collector's batch processor (0.120, the version pinned)
# and an SDK's batch span processor bound a batch's spans, not its bytes; the captured
# instrumentation spans carry toy prompts, and real prompts and histories make model spans
# several times larger: a batch must fit spans this many times the largest captured one.
_SPAN_MARGIN = 3


def _largest_captured_span() -> tuple[str, float]:
    """The fixture request (tests/fixtures/otlp: real instrumentations, captured) with the
    most OTLP/protobuf bytes per span, and that size."""
    sizes: dict[str, float] = {}
    for path in sorted((ROOT / "tests" / "fixtures" / "otlp").glob("*.json")):
        if path.name.endswith(".expected.json"):
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            request = json_format.Parse(line, ExportTraceServiceRequest())
            spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            if spans:
                sizes[path.name] = max(sizes.get(path.name, 0.0), request.ByteSize() / spans)
    largest = max(sizes, key=sizes.__getitem__)
    return largest, sizes[largest]


def _fits(spans: int, cap: int, what: str) -> None:
    name, size = _largest_captured_span()
    assert size > 8000, name  # the captures still hold model spans with their prompts
    needed = spans * size * _SPAN_MARGIN
    assert needed <= cap, (
        f"{what}: {spans} spans {_SPAN_MARGIN} times the size of {name}'s ({size:.0f} B) make"
        f" {needed / 2**20:.1f} MiB, over ingest.max_request_bytes ({cap / 2**20:.0f} MiB)"
    )


@pytest.mark.parametrize(
    ("collector", "manifest"),
    [(COLLECTOR, SIDECAR), (GATEWAY_COLLECTOR, GATEWAY)],
    ids=["otel-collector.yaml to the sidecar", "gateway collector to the gateway"],
)
def test_collector_batches_fit_the_toolwatch_they_send_to(
    collector: Path, manifest: Path, tmp_path: Path
) -> None:
    """otel-collector.yaml goes with the sidecar (its header: "run a collector container
    with otel-collector.yaml in the pod"); the gateway Collector sends to the gateway."""
    batch = read_yaml(collector)["processors"]["batch"]
    config, _ = _deployed(manifest, tmp_path)
    assert batch["send_batch_size"] <= batch["send_batch_max_size"]  # else it will not start
    _fits(batch["send_batch_max_size"], config.ingest.max_request_bytes, collector.name)


def test_sidecar_agent_batches_fit_toolwatch(tmp_path: Path) -> None:
    """The agent exports straight to the sidecar: its SDK's batches (512 spans by default)."""
    config, workload = _deployed(SIDECAR, tmp_path)
    (agent,) = workload["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    spans = int(env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
    _fits(spans, config.ingest.max_request_bytes, "the sidecar's agent")


# --- Kubernetes manifests -------------------------------------------------------------------


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY, MONITORING], ids=lambda p: p.name)
def test_manifests_parse_into_named_objects(path: Path) -> None:
    documents = yaml_documents(path)
    assert documents
    for doc in documents:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_containers_are_non_root_read_only_and_bounded(path: Path) -> None:
    for workload in _workloads(path):
        pod = workload["spec"]["template"]["spec"]
        for container in _all_containers(pod):
            security = container["securityContext"]
            assert pod["securityContext"]["runAsNonRoot"] or security["runAsNonRoot"]
            assert security.get("runAsUser", 1) != 0 and security["readOnlyRootFilesystem"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][bound]), container["name"]


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_toolwatch_is_probed_and_scrapable_on_the_metrics_port(path: Path) -> None:
    (workload,) = [w for w in _workloads(path) if _has_toolwatch(w)]
    container = _toolwatch_container(workload)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == DEFAULT_METRICS_PORT
    assert _flag(container, "--metrics-listen") == f"0.0.0.0:{DEFAULT_METRICS_PORT}"
    for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path_, "port": "metrics"}
    assert _flag(container, "--config") == "/etc/toolwatch/toolwatch.yaml"
    assert any(m["mountPath"] == "/etc/toolwatch" for m in container["volumeMounts"])


def _has_toolwatch(workload: dict[str, Any]) -> bool:
    pod = workload["spec"]["template"]["spec"]
    return any(c["name"] == "toolwatch" for c in _all_containers(pod))


def _deployed(path: Path, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """The manifest's toolwatch configuration, loaded as toolwatch loads it, and the
    workload that runs toolwatch."""
    target = tmp_path / "toolwatch.yaml"
    target.write_text(_toolwatch_config_map(path), encoding="utf-8")
    (workload,) = [w for w in _workloads(path) if _has_toolwatch(w)]
    return load_config(target), workload


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_toolwatch_config_map_is_a_valid_configuration(path: Path, tmp_path: Path) -> None:
    config, workload = _deployed(path, tmp_path)
    pod = workload["spec"]["template"]["spec"]
    pre_stop = _toolwatch_container(workload).get("lifecycle", {}).get("preStop", {})
    pause = int(pre_stop.get("exec", {}).get("command", ["sleep", "0"])[-1])
    # The pod's grace must cover the preStop pause, toolwatch's own drain and its wait for a
    # last scrape, which must last a scrape interval.
    linger = config.shutdown_metrics_linger_seconds
    assert linger >= _scrape_interval_seconds()
    assert pod["terminationGracePeriodSeconds"] > pause + config.shutdown_grace_seconds + linger


# docs/deployment.md "Memory", the sum the layouts are sized by, as it is written there (its
# "\u00d7" as "x"): the process at rest, a buffered span against the buffer's own estimate of it, a
# request body being read against its size (the request slots' and the gRPC health check's read
# turns), the request being decoded, the most a remembered trace id takes (bench.remembered), and
# the references' memories: shadow halves and joined pairs, the conversation scope's conversations.
MEMORY_SUM = (
    "resident ≈ 100 MiB + 1.1 x assembly.max_buffered_bytes",
    "+ 2.5 x (ingest.max_concurrent_requests + 4) x ingest.max_request_bytes",
    "+ 7 x ingest.max_request_bytes (the request being decoded)",
    "+ 33 B x assembly.max_remembered_traces (ids of evaluated traces)",
    "(+ shadow.max_waiting_bytes + 200 B x shadow.max_waiting, when shadow is enabled)",
    "(+ policy.conversation_max_bytes, with policy.verification_scope: conversation)",
)
_RESIDENT_AT_REST = 100 * 2**20
_RESIDENT_PER_BUFFERED_BYTE = 1.1
_RESIDENT_PER_BODY_BYTE = 2.5
_RESIDENT_PER_DECODED_BYTE = 7
_RESIDENT_PER_REMEMBERED_ID = 33


def _shadow_bytes(shadow: ShadowSettings) -> int:
    """The waiting halves' bound and the pairs joined within the timeout (MEMORY_SUM)."""
    assert PAIRED_ENTRY_BYTES == 200  # the sum's `200 B`
    return shadow.max_waiting_bytes + PAIRED_ENTRY_BYTES * shadow.max_waiting


def _memory_limit(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * {"Mi": 2**20, "Gi": 2**30}[unit]


def test_the_memory_sum_is_the_documented_one() -> None:
    deployment = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    memory = deployment.partition("\n## Memory\n")[2].replace("\u00d7", "x")
    written = [line.strip() for line in memory.splitlines()]
    start = written.index(MEMORY_SUM[0])
    assert tuple(written[start : start + len(MEMORY_SUM)]) == MEMORY_SUM
    assert READ_TURNS == 4  # the sum's `+ 4`


def _at_the_bounds(config: Config) -> float:
    """Bytes resident at ``config``'s bounds, by MEMORY_SUM."""
    ingest, assembly, policy = config.ingest, config.assembly, config.policy
    bodies = (ingest.max_concurrent_requests + READ_TURNS) * ingest.max_request_bytes
    return (
        _RESIDENT_AT_REST
        + _RESIDENT_PER_BUFFERED_BYTE * assembly.max_buffered_bytes
        + _RESIDENT_PER_BODY_BYTE * bodies
        + _RESIDENT_PER_DECODED_BYTE * ingest.max_request_bytes
        + _RESIDENT_PER_REMEMBERED_ID * assembly.max_remembered_traces
        + (_shadow_bytes(config.shadow) if config.shadow.enabled else 0)
        + (policy.conversation_max_bytes if policy.verification_scope == "conversation" else 0)
    )


@pytest.mark.parametrize("path", [SIDECAR, GATEWAY], ids=lambda p: p.name)
def test_toolwatch_at_its_bounds_fits_its_memory_limit(path: Path, tmp_path: Path) -> None:
    """By MEMORY_SUM, with a tenth of the limit to spare."""
    config, workload = _deployed(path, tmp_path)
    limit = _memory_limit(_toolwatch_container(workload)["resources"]["limits"]["memory"])
    worst = _at_the_bounds(config)
    assert worst < 0.9 * limit, f"{worst / 2**20:.0f} MiB at the bounds, limit {limit >> 20} MiB"


def _deployment_section(title: str) -> str:
    deployment = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    return deployment.partition(f"\n## {title}\n")[2].partition("\n## ")[0]


def test_the_memory_sum_of_the_built_in_defaults_is_the_documented_one() -> None:
    """docs/deployment.md, Memory: "With the built-in defaults ... ≈ 1,585 MiB"."""
    worst = _at_the_bounds(Config.model_validate({}))
    memory = " ".join(_deployment_section("Memory").split())
    assert f"≈ {round(worst / 2**20):,} MiB" in memory


def test_the_sizing_examples_fit_the_limits_they_give(tmp_path: Path) -> None:
    """docs/deployment.md, Sizing: each worked example's settings load as toolwatch loads
    them, sum by MEMORY_SUM to the MiB its first line says, and fit the limit it gives with
    a tenth to spare."""
    blocks = re.findall(r"```yaml\n(.*?)```", _deployment_section("Sizing"), re.DOTALL)
    assert len(blocks) == 2  # the sidecar and the gateway
    for n, block in enumerate(blocks):
        head = re.match(r"# \w+: ([\d,]+) MiB at the bounds, limit (\d+(?:Mi|Gi))\n", block)
        assert head is not None, block
        target = tmp_path / f"sizing-{n}.yaml"
        target.write_text(block, encoding="utf-8")
        worst = _at_the_bounds(load_config(target))
        assert round(worst / 2**20) == int(head[1].replace(",", "")), block
        assert worst < 0.9 * _memory_limit(head[2]), block


def test_the_sizing_section_quotes_the_defaults() -> None:
    """docs/deployment.md, Sizing: every "`assembly.name` (default N)" is the default."""
    quoted = re.findall(
        r"`(ingest|assembly)\.(\w+)` \(default ([\d,.]+)\)", _deployment_section("Sizing")
    )
    assert len(quoted) >= 4, quoted
    sections = {"ingest": IngestSettings, "assembly": AssemblySettings}
    for section, name, value in quoted:
        default = sections[section].model_fields[name].default
        assert float(value.replace(",", "")) == default, (section, name, value)


def test_sidecar_agent_exports_to_toolwatch_on_loopback() -> None:
    (workload,) = _workloads(SIDECAR)
    toolwatch = _toolwatch_container(workload)
    assert toolwatch.get("restartPolicy") == "Always"  # a native sidecar: outlives the agent
    grpc_listen = _flag(toolwatch, "--grpc-listen") or DEFAULT_GRPC_LISTEN
    assert grpc_listen.startswith("127.0.0.1:")
    (agent,) = workload["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{grpc_listen}"


def test_gateway_toolwatch_listens_for_the_collectors_behind_a_headless_service() -> None:
    documents = yaml_documents(GATEWAY)
    (service,) = [d for d in documents if d["metadata"]["name"] == "toolwatch-headless"]
    (workload,) = [w for w in _workloads(GATEWAY) if _has_toolwatch(w)]
    assert service["spec"]["clusterIP"] == "None"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "otlp-grpc": 4317,
        "metrics": DEFAULT_METRICS_PORT,
    }
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert _flag(_toolwatch_container(workload), "--grpc-listen") == "0.0.0.0:4317"


def test_gateway_toolwatch_admits_only_the_collectors_and_prometheus() -> None:
    """Its listeners have no TLS or tokens there: a network policy keeps other pods out."""
    documents = yaml_documents(GATEWAY)
    (workload,) = [w for w in _workloads(GATEWAY) if _has_toolwatch(w)]
    (collector,) = [w for w in _workloads(GATEWAY) if not _has_toolwatch(w)]
    (policy,) = [d for d in documents if d["kind"] == "NetworkPolicy"]
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in _toolwatch_container(workload)["ports"]}
    admitted = {}
    for rule in policy["spec"]["ingress"]:
        (source,) = rule["from"]
        for port in rule["ports"]:
            assert port["port"] in ports  # a port the container names
            admitted[port["port"]] = source["podSelector"]["matchLabels"]
    collector_labels = collector["spec"]["template"]["metadata"]["labels"]
    assert admitted["otlp-grpc"].items() <= collector_labels.items()
    assert admitted["metrics"] == {"app.kubernetes.io/name": "prometheus"}
    assert set(admitted) == {"otlp-grpc", "metrics"}


def test_gateway_collector_may_watch_the_endpoints_it_resolves() -> None:
    documents = yaml_documents(GATEWAY)
    (collector,) = [w for w in _workloads(GATEWAY) if not _has_toolwatch(w)]
    account = collector["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [d for d in documents if d["kind"] == "RoleBinding"]
    roles = {
        b["roleRef"]["name"]
        for b in bindings
        if {"kind": "ServiceAccount", "name": account, "namespace": "toolwatch"} in b["subjects"]
    }
    rules = [
        r
        for d in documents
        if d["kind"] == "Role" and d["metadata"]["name"] in roles
        for r in d["rules"]
    ]
    slices = [r for r in rules if "endpointslices" in r["resources"]]
    assert slices and {"get", "list", "watch"} <= set(slices[0]["verbs"])
