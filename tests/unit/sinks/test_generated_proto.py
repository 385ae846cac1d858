"""The generated protobuf code in the tree is exactly what scripts/gen_proto.sh produces."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolwatch._proto.toolwatch.v1 import findings_pb2, findings_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gen_proto.sh"
CHECKED_IN = ROOT / "src" / "toolwatch" / "_proto"


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def regenerate(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="gen_proto.sh needs bash")
def test_regenerating_gives_byte_identical_files(tmp_path: Path) -> None:
    out = tmp_path / "_proto"
    result = regenerate(out)
    assert result.returncode == 0, result.stderr
    generated, checked_in = tree(out), tree(CHECKED_IN)
    assert sorted(generated) == sorted(checked_in)
    drifted = [name for name in generated if generated[name] != checked_in[name]]
    assert drifted == [], "run scripts/gen_proto.sh and keep the result"


@pytest.mark.skipif(shutil.which("bash") is None, reason="gen_proto.sh needs bash")
def test_the_script_refuses_to_replace_a_directory_it_did_not_generate(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    result = regenerate(tmp_path)
    assert result.returncode == 1
    assert "refusing to replace" in result.stderr
    assert precious.read_text() == "keep me"


def test_generated_modules_import_inside_the_package() -> None:
    # The descriptor keeps the .proto's own path, as every other language sees it.
    assert findings_pb2.DESCRIPTOR.name == "toolwatch/v1/findings.proto"
    assert findings_pb2.DESCRIPTOR.package == "toolwatch.v1"
    assert findings_pb2_grpc.FindingsServiceStub.__name__ == "FindingsServiceStub"
    service = findings_pb2.DESCRIPTOR.services_by_name["FindingsService"]
    assert service.methods_by_name["Subscribe"].output_type.full_name == "toolwatch.v1.Finding"
