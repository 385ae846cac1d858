"""Where ``serve``'s configuration comes from on the command line, for ``serve`` and
``check-config`` alike: the file (``--config``, ``TOOLWATCH_CONFIG``, check-config's
CONFIG_FILE) and the keys flags and ``TOOLWATCH_*`` variables set over it (``SERVE_FLAGS``,
a flag winning over its variable), read into ``Sources``, which loads and checks it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolwatch.build_revision import RevisionError, revision
from toolwatch.config import (
    Config,
    ConfigError,
    check_certificate,
    check_hot_path,
    check_outputs,
    load_config,
)

__all__ = [
    "SERVE_DEFAULTS_WARNING",
    "SERVE_FLAGS",
    "Sources",
    "add_config_option",
    "add_override_flags",
    "another_address",
    "config_file",
    "config_origin",
    "env_path",
    "env_value",
    "read_sources",
]

#: The flags that set a configuration key over the file's (``serve`` and ``check-config``).
SERVE_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    # flag, environment variable, config key, help
    (
        "--grpc-listen",
        "TOOLWATCH_GRPC_LISTEN",
        "listen.grpc",
        "OTLP/gRPC HOST:PORT (127.0.0.1:4317)",
    ),
    (
        "--http-listen",
        "TOOLWATCH_HTTP_LISTEN",
        "listen.http",
        "OTLP/HTTP HOST:PORT (127.0.0.1:4318)",
    ),
    (
        "--metrics-listen",
        "TOOLWATCH_METRICS_LISTEN",
        "listen.metrics",
        "/metrics, /healthz, /readyz HOST:PORT (127.0.0.1:9464)",
    ),
    (
        "--stream-listen",
        "TOOLWATCH_STREAM_LISTEN",
        "listen.stream",
        "findings stream HOST:PORT (127.0.0.1:4319)",
    ),
    ("--findings", "TOOLWATCH_FINDINGS", "output.findings", "findings JSON lines: PATH or -"),
    (
        "--dump-tooltraces",
        "TOOLWATCH_DUMP_TOOLTRACES",
        "output.dump_tooltraces",
        "write every ToolTrace as a JSON line: PATH or -",
    ),
    ("--tls-cert", "TOOLWATCH_TLS_CERT", "security.tls.cert_file", "TLS certificate chain (PEM)"),
    ("--tls-key", "TOOLWATCH_TLS_KEY", "security.tls.key_file", "TLS private key (PEM)"),
    (
        "--tls-client-ca",
        "TOOLWATCH_TLS_CLIENT_CA",
        "security.tls.client_ca_file",
        "require client certificates signed by this CA (PEM): mutual TLS",
    ),
    (
        "--bearer-token-file",
        "TOOLWATCH_BEARER_TOKEN_FILE",
        "security.auth.bearer_token_file",
        "require a bearer token listed in this file (one per line)",
    ),
)


def another_address(listener: str) -> str:
    """How to give ``listener`` another address: its flag, its variable, its key."""
    key = f"listen.{listener}"
    for flag, variable, setting, _help in SERVE_FLAGS:
        if setting == key:
            return f"  choose another with {flag} HOST:PORT, {variable} or {key} in the file"
    return f"  choose another with {key} in the configuration file"


_CONFIG_HELP = "the configuration file (YAML; docs/configuration.md); env TOOLWATCH_CONFIG"


def add_config_option(parser: Any) -> None:
    """``--config`` (``serve``, ``check-config``, ``replay``); ``config_file`` reads it."""
    parser.add_argument("--config", type=Path, metavar="FILE", help=_CONFIG_HELP)


def add_override_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of ``SERVE_FLAGS`` (``serve``, ``check-config``). Their variables are read
    by ``read_sources``, so that a value is known to come from one or the other."""
    for flag, env, _key, help_text in SERVE_FLAGS:
        parser.add_argument(flag, help=f"{help_text}; env {env}")


def env_value(name: str) -> str | None:
    """The variable's value; an empty one is unset, as in most tools (``VAR= cmd``)."""
    return os.environ.get(name) or None


def env_path(name: str) -> Path | None:
    value = env_value(name)
    return Path(value) if value else None


def config_file(args: argparse.Namespace) -> Path | None:
    """The configuration file a command reads: ``check-config``'s CONFIG_FILE, else
    ``--config``, else ``TOOLWATCH_CONFIG``; none (the built-in defaults) without them."""
    named: Path | None = getattr(args, "file", None) or getattr(args, "config", None)
    return named or env_path("TOOLWATCH_CONFIG")


def config_origin(args: argparse.Namespace) -> str | None:
    """``TOOLWATCH_CONFIG`` when the configuration file is the one it names (a value left in
    a shell or a CI job's environment, which the command line does not show), for an error
    reading the file to name it; ``None`` for one the command line names, or none."""
    named = getattr(args, "file", None) or getattr(args, "config", None)
    return "TOOLWATCH_CONFIG" if not named and env_path("TOOLWATCH_CONFIG") else None


@dataclass(frozen=True, slots=True)
class Sources:
    """What ``serve`` builds its configuration from: the file (``None``: the defaults), and
    the keys the flags and variables of ``SERVE_FLAGS`` set over it (``overrides``), each
    with the flag or variable that gave it (``origins``: a flag wins over its variable)."""

    path: Path | None
    overrides: dict[str, Any]
    origins: dict[str, str]
    path_origin: str | None = None  # the variable that named ``path``, if one did

    @property
    def name(self) -> str:
        """The file as messages name it, or ``defaults``."""
        return str(self.path) if self.path is not None else "defaults"

    def load(self) -> Config:
        """The configuration, validated (``load_reloaded`` on SIGHUP)."""
        return load_config(self.path, self.overrides, self.origins, path_origin=self.path_origin)

    def load_reloaded(self) -> Config:
        """``load`` for a SIGHUP, and ``ingest.decoder`` refused where this install cannot
        run it (``check_hot_path``): the running server keeps its own, but the restart that
        key takes would fail, so the reload fails now, naming it."""
        config = self.load()
        check_hot_path(config, self.path, self.overrides, self.origins)
        return config

    def load_checked(self) -> Config:
        """``load``, and the output files refused that ``serve`` could not open, an
        expired certificate (checked at start-up only: a SIGHUP ``load``s), and a
        ``TOOLWATCH_REVISION`` that is no revision (``build_revision``)."""
        config = self.load()
        try:
            revision()
        except RevisionError as error:
            raise ConfigError(str(error)) from None
        check_outputs(config, self.path, self.overrides, self.origins)
        check_certificate(config, self.path, self.overrides, self.origins)
        check_hot_path(config, self.path, self.overrides, self.origins)
        return config


def read_sources(args: argparse.Namespace) -> Sources:
    """Where the command line and environment say ``serve``'s configuration comes from."""
    overrides: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for flag, variable, key, _help in SERVE_FLAGS:
        given: str | None = getattr(args, flag[2:].replace("-", "_"))
        value, origin = (given, flag) if given is not None else (env_value(variable), variable)
        if value is not None:
            overrides[key], origins[key] = value, origin
    return Sources(config_file(args), overrides, origins, config_origin(args))


#: Logged by a ``serve`` given no file: it finds no safety regression, however bad the calls.
SERVE_DEFAULTS_WARNING = (
    "no configuration file (--config or TOOLWATCH_CONFIG): serving the built-in defaults,"
    " which have no policy and no golden cases"
)
