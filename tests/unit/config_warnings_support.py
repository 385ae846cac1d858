"""The warnings of how runs are judged that configuration, ``check-config`` and ``replay``
tests expect, word for word: a policy that can never raise MISSING_VERIFICATION_STEP, and a
configuration with nothing to judge runs by but loops."""

from __future__ import annotations

HALF_POLICY = (
    "policy.dangerous_tools 'issue_refund': nothing can verify it (no"
    " policy.verification_tools) and no invariants rule on every agent forbids it or needs a"
    " tool called first (order), so an unverified call is never MISSING_VERIFICATION_STEP:"
    " add verification_tools (any of which then verifies it) and, to say which verifies which,"
    " verified_by or bindings; until then one is caught only as drift from a reference"
    " (DANGEROUS_ACTION_DRIFT: allowed_tools, a golden case or a shadow source)"
)
NO_POLICY = (
    "no policy (policy.dangerous_tools, allowed_tools, invariants), golden cases"
    " (golden.cases_file) or shadow pairs (shadow.enabled)"
)
ONLY_LOOPS = (
    f"{NO_POLICY}: nothing can raise a finding but loops' UNNECESSARY_TOOL_CALL, for a call"
    " made again with the same arguments more than policy.repeat_limit (1) times after it"
    " succeeded; no call is checked for a verification step or for drift"
)
