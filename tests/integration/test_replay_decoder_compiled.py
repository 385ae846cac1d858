"""``replay`` given ``ingest.decoder: compiled`` on an install without the compiled OTLP
scanner (a wheel built without a C compiler: ``toolwatch.ingest._wire`` cannot be imported),
review of 73e1b44.

Was: 73e1b44 moved the check of the compiled scanner from the field's validator to
``check_hot_path`` (``serve``, ``check-config``), "so replay, which decodes no OTLP, takes such
a configuration anywhere". But replay decodes each recorded request (``decode_otlp_json``),
whose scanner raised ``RuntimeError`` for ``compiled`` where the extension is missing: replay
died with a traceback and exit 1, the code a CI job reads as a replay gate that failed (before
73e1b44 the configuration was refused at load, exit 2). Now: replay decodes with what the
install has (``auto``): a production configuration replays anywhere, as docs/commands.md says.

The install without the extension is a real ``toolwatch`` process in which importing
``toolwatch.ingest._wire`` fails, as it does where the extension was not built.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.cli_support import EXAMPLES, clean_env

RECORDING = EXAMPLES / "unverified-refund.otlp.json"

#: ``toolwatch`` as installed without the compiled OTLP scanner.
_WITHOUT_THE_EXTENSION = """
import sys

class _NotBuilt:
    def find_spec(self, name, path=None, target=None):
        if name == "toolwatch.ingest._wire":
            raise ImportError("no module named toolwatch.ingest._wire (not built)")
        return None

sys.meta_path.insert(0, _NotBuilt())
from toolwatch.cli import main
sys.argv[0] = "toolwatch"
sys.exit(main(sys.argv[1:]))
"""


def _replay_without_the_extension(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-c", _WITHOUT_THE_EXTENSION),
            *("replay", "--no-progress", "--config", str(config), str(RECORDING)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )


def test_replay_takes_decoder_compiled_where_the_compiled_scanner_is_not_built(
    tmp_path: Path,
) -> None:
    """docs/commands.md (exit codes): replay "takes a production configuration anywhere";
    73e1b44: "replay ... takes such a configuration anywhere". Its report is the one the same
    configuration with the reference decoder gives."""
    reference = tmp_path / "reference.yaml"
    reference.write_text("ingest:\n  decoder: reference\n")
    production = tmp_path / "production.yaml"
    production.write_text("ingest:\n  decoder: compiled\n")

    expected = _replay_without_the_extension(reference)
    assert (expected.returncode, expected.stderr.count("Traceback")) == (0, 0)
    assert expected.stdout  # a report

    got = _replay_without_the_extension(production)
    assert "Traceback" not in got.stderr, got.stderr[-600:]
    assert (got.returncode, got.stdout) == (expected.returncode, expected.stdout)
