"""Copies embedded in the manifests and README equal their files, and the image runs toolwatch
non-root on the ports it exposes, scraped as the README's commands say."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.integration.deploy_support import (
    DEFAULT_METRICS_PORT,
    DEPLOY,
    GATEWAY,
    GATEWAY_COLLECTOR,
    MONITORING,
    PROMETHEUS_CONFIG,
    ROOT,
    RULES,
    SIDECAR,
    port_of,
    read_yaml,
    yaml_documents,
)
from toolwatch import cli, cli_sources

DOCKERFILE = ROOT / "Dockerfile"


# --- embedded copies ------------------------------------------------------------------------


def test_prometheus_rule_equals_the_rules_file() -> None:
    (rule,) = [d for d in yaml_documents(MONITORING) if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == read_yaml(RULES)


def test_gateway_config_map_equals_the_collector_file() -> None:
    (config_map,) = [
        d for d in yaml_documents(GATEWAY) if d["metadata"]["name"] == "otel-gateway-config"
    ]
    assert yaml.safe_load(config_map["data"]["gateway.yaml"]) == read_yaml(GATEWAY_COLLECTOR)


def test_the_readmes_regeneration_leaves_the_shipped_copies_unchanged(tmp_path: Path) -> None:
    """deploy/README.md's "Keeping the copies in sync" commands, run on the repository as
    shipped, change no byte: a comment that drifted in a copy passes the parsed comparisons
    above, and the commands would then rewrite a manifest marked "do not edit"."""
    section = (DEPLOY / "README.md").read_text(encoding="utf-8")
    section = section.partition("## Keeping the copies in sync")[2]
    commands = re.findall(r"^    (sed .*)$", section, re.MULTILINE)
    assert len(commands) == 4
    for name in ("kubernetes", "prometheus", "collector"):
        shutil.copytree(DEPLOY / name, tmp_path / "deploy" / name)
    for command in commands:
        subprocess.run(["sh", "-c", command], cwd=tmp_path, check=True)
    copies = (MONITORING, GATEWAY)
    changed = [
        copy.name
        for copy in copies
        if (tmp_path / copy.relative_to(ROOT)).read_bytes() != copy.read_bytes()
    ]
    assert changed == [], f"regenerating as deploy/README.md says rewrites {changed}"


def test_monitors_and_prometheus_config_use_the_job_the_rules_assume() -> None:
    (job,) = set(re.findall(r'up\{job="([^"]+)"\}', RULES.read_text(encoding="utf-8")))
    (scrape,) = read_yaml(PROMETHEUS_CONFIG)["scrape_configs"]
    assert scrape["job_name"] == job
    assert scrape["static_configs"][0]["targets"] == [f"127.0.0.1:{DEFAULT_METRICS_PORT}"]
    monitors = [d for d in yaml_documents(MONITORING) if d["kind"].endswith("Monitor")]
    # Pods, not a Service: a terminating pod leaves a Service's Endpoints before the scrape
    # that counts its drain.
    assert [d["kind"] for d in monitors] == ["PodMonitor", "PodMonitor"]
    for monitor in monitors:
        endpoints = monitor["spec"]["podMetricsEndpoints"]
        relabel = endpoints[0]["relabelings"]
        assert {"action": "replace", "targetLabel": "job", "replacement": job} in relabel


# --- image ----------------------------------------------------------------------------------


def test_dockerfile_runs_toolwatch_non_root_on_the_ports_it_exposes() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.1[12]-slim", text, re.MULTILINE)
    assert "pip install ." in text
    # The image must carry the compiled OTLP scanner: setup.py builds it, the build checks it.
    assert re.search(r"^COPY .*\bsetup\.py\b", text, re.MULTILINE)
    assert "COMPILED_UNAVAILABLE" in text
    (user,) = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    exposed = {int(p) for p in re.findall(r"^EXPOSE (.+)$", text, re.MULTILINE)[0].split()}
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", text, re.MULTILINE)
    (command,) = re.findall(r"^CMD (.+)$", text, re.MULTILINE)
    assert json.loads(entrypoint) == ["toolwatch"]
    args = json.loads(command)
    listens = {port_of(args[args.index(f) + 1]) for f in args if f.endswith("-listen")}
    assert args[0] == "serve" and listens == exposed == {4317, 4318, DEFAULT_METRICS_PORT}
    # Plain HTTP or TLS, whichever the listener speaks (test_security_tls runs it against both).
    assert f'"toolwatch.healthcheck", "127.0.0.1:{DEFAULT_METRICS_PORT}"' in text
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".git", ".venv"} <= set(ignored)


def _commented_kubernetes_block() -> dict[str, Any]:
    """prometheus.yml's commented-out Kubernetes block (Prometheus without the Operator)."""
    lines = PROMETHEUS_CONFIG.read_text(encoding="utf-8").splitlines()
    start = lines.index("    # kubernetes_sd_configs:")
    block = []
    for line in lines[start:]:
        if not line.startswith("    # "):
            break
        block.append(line.removeprefix("    # "))
    loaded: dict[str, Any] = yaml.safe_load("\n".join(block))
    return loaded


def test_the_plain_prometheus_kubernetes_block_scrapes_pods_as_the_pod_monitors_do() -> None:
    """A terminating pod leaves a Service's endpoints at once, and Prometheus' targets with
    it, before the scrape that reads what its drain evaluated: the block shipped for plain
    Prometheus kept targets by Service (``role: endpoints``) and so lost every drain's
    findings. It discovers the gateway's pods by their labels, as the PodMonitor does."""
    block = _commented_kubernetes_block()
    (discovery,) = block["kubernetes_sd_configs"]
    assert discovery["role"] == "pod"
    relabel = block["relabel_configs"]
    kept = {r["source_labels"][0]: r["regex"] for r in relabel if r.get("action") == "keep"}
    (gateway,) = [
        d
        for d in yaml_documents(GATEWAY)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "toolwatch"
    ]
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    prefix = "__meta_kubernetes_pod_label_"
    for source, regex in kept.items():
        if source.startswith(prefix):
            name = next(
                k for k in labels if re.sub(r"[^a-zA-Z0-9_]", "_", k) == source[len(prefix) :]
            )
            assert labels[name] == regex
    assert kept["__meta_kubernetes_pod_container_port_name"] == "metrics"
    assert not any("service" in source for source in kept)
    assert any(r.get("target_label") == "namespace" for r in relabel)


def test_the_readmes_sidecar_command_beside_a_collector_keeps_metrics_reachable(
    tmp_path: Path,
) -> None:
    """deploy/README.md gives the sidecar's whole command line for a pod that runs a
    Collector too. Without ``--metrics-listen 0.0.0.0:9464`` the metrics listener fell back
    to loopback, where kubelet's probes (the pod's address, port ``metrics``) never reach
    it: the liveness probe restarted toolwatch forever."""
    text = (DEPLOY / "README.md").read_text(encoding="utf-8")
    (block,) = re.findall(
        r"^    (toolwatch serve --config /etc/toolwatch/toolwatch\.yaml.*?)\n\n", text, re.M | re.S
    )
    command = shlex.split(block.replace("\\\n", " "))
    documents = yaml_documents(SIDECAR)
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in spec["initContainers"] if c["name"] == "toolwatch"]
    mounted = tmp_path / "toolwatch.yaml"  # the ConfigMap at /etc/toolwatch
    mounted.write_text(config_map["data"]["toolwatch.yaml"], encoding="utf-8")
    assert command[:2] == ["toolwatch", "serve"]
    args = [str(mounted) if a == "/etc/toolwatch/toolwatch.yaml" else a for a in command[1:]]
    config = cli_sources.read_sources(cli._parser().parse_args(args)).load()
    probed = {container[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe")}
    assert probed == {"metrics"}
    assert config.listen.grpc == "127.0.0.1:14317"  # moved for the Collector
    metrics = container["args"][container["args"].index("--metrics-listen") + 1]
    assert config.listen.metrics == metrics
