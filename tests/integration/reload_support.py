"""What the tests of a configuration reload (SIGHUP) share: a policy other than the examples'
minimal one, to reload to, and the gauges that say how the last reload went."""

from __future__ import annotations

OTHER_POLICY = """\
policy:
  dangerous_tools: [cancel_order]
  verification_tools: [lookup_order]
"""
RELOADED = "toolwatch_config_last_reload_successful"
RELOADED_AT = "toolwatch_config_last_reload_success_timestamp_seconds"
