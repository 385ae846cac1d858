"""Configuration: one validated object, built once at start-up, passed down as plain values.

Sources, lowest precedence first: built-in defaults, the YAML file (``--config``), then
``TOOLWATCH_*`` environment variables and command-line flags (the CLI merges those two).
Every error names the file, the field path and the reason, and stops start-up.

The sections of other stages are defined next to their stage (``evaluation.settings``,
``references.settings``); this package composes them and owns the server-level sections:

- ``whole``: ``Config``, the sections composed, and the start-up checks of what it names;
- ``load``: ``load_config``, reading the YAML file and applying overrides;
- ``listen``: the ``listen:`` section, listen addresses, ports and hosts;
- ``security``: the ``security:`` section (TLS, bearer tokens) and its files;
- ``stages``: the ``ingest:``, ``assembly:``, ``output:`` and ``metrics:`` sections;
- ``errors``: ``ConfigError``, and how errors name where a value came from.
"""

from toolwatch.config.errors import ConfigError
from toolwatch.config.listen import (
    LISTENERS,
    Listener,
    ListenSettings,
    host_addresses,
    is_ip_address,
    is_loopback,
    parse_listen_address,
    parse_port,
)
from toolwatch.config.load import load_config
from toolwatch.config.security import AuthSettings, SecuritySettings, TlsSettings, read_token_file
from toolwatch.config.stages import (
    AssemblySettings,
    IngestSettings,
    MetricsSettings,
    OutputSettings,
)
from toolwatch.config.whole import (
    Config,
    check_certificate,
    check_hot_path,
    check_outputs,
    descriptor_name,
    output_warnings,
    private_file_warning,
    unopenable_descriptor,
    unrunnable_decoder,
)

__all__ = [
    "LISTENERS",
    "AssemblySettings",
    "AuthSettings",
    "Config",
    "ConfigError",
    "IngestSettings",
    "ListenSettings",
    "Listener",
    "MetricsSettings",
    "OutputSettings",
    "SecuritySettings",
    "TlsSettings",
    "check_certificate",
    "check_hot_path",
    "check_outputs",
    "descriptor_name",
    "host_addresses",
    "is_ip_address",
    "is_loopback",
    "load_config",
    "output_warnings",
    "parse_listen_address",
    "parse_port",
    "private_file_warning",
    "read_token_file",
    "unopenable_descriptor",
    "unrunnable_decoder",
]
