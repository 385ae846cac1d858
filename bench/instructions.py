"""``make bench-instructions`` (``python -m bench.instructions``): CPU instructions per span,
stage by stage, counted by valgrind's callgrind.

On a shared machine timings vary by ±15% from one run to the next; instruction counts do not:
the same code on the same requests executes the same instructions, whatever else the machine
is doing (to within 0.05% here: the child runs with a fixed hash seed, and what is left is
address-dependent). So this is how to see what a change to the hot path did, to a fraction of
a percent (run it before and after; ``--out`` keeps the JSON). Instructions are not time
(cache misses and branch mispredictions cost cycles, not instructions), so ``make bench``
stays the measure of speed; this is the measure of a change.

Each stage of ``bench.stages`` (the requests ``make bench`` sends, in-process) runs once under
callgrind. Collection is off except inside ``operator.call``, through which the child calls
each stage (nothing in toolwatch calls it), and callgrind writes one profile part as each call
returns; the parent reads the parts' totals. The cyclic collector is off while stages run
(the server runs it rarely, ``toolwatch.process_tuning``; here its timing would depend on setup).
About 2 minutes for the default single copy of the request pool.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.plans import Settings
from bench.stages import stage_config, stage_runs
from toolwatch import compiled_state

__all__ = ["Instructions", "main", "measure", "profile_total", "valgrind"]

_MARKER = "_operator_call"  # the C function behind operator.call, in libpython
_TOTALS = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def _child(out: Path, copies: int, names: Sequence[str], history: bool) -> None:
    """Run each named stage once through ``operator.call``; record the order and spans."""
    settings = Settings()
    config = stage_config(settings.completion_wait)
    if history:  # read as a gateway reads them (assembly.missing_spans_from_history)
        assembly = config.assembly.model_copy(update={"missing_spans_from_history": True})
        config = config.model_copy(update={"assembly": assembly})
    templates = dataclasses.replace(settings.templates(), history=history).build()
    stages, pipeline = stage_runs(config, templates, copies)
    unknown = sorted(set(names) - set(stages))
    if unknown:
        raise SystemExit(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(stages)}")
    chosen = [name for name in stages if not names or name in names]
    gc.collect()
    gc.freeze()
    gc.disable()
    for name in chosen:
        operator.call(stages[name])
    record = {
        "stages": chosen,
        "spans": pipeline.spans,
        "hot_path": compiled_state.state().describe(),
    }
    out.write_text(json.dumps(record))


def profile_total(profile: Path) -> int:
    """The instruction total of one callgrind profile (or profile part)."""
    found = _TOTALS.search(profile.read_bytes())
    if found is None:
        raise RuntimeError(f"no totals in callgrind profile {profile}")
    return int(found.group(1))


def _parts(prefix: Path, count: int) -> list[int]:
    """The instruction totals of callgrind's parts ``prefix.1`` .. ``prefix.count``."""
    return [profile_total(Path(f"{prefix}.{n}")) for n in range(1, count + 1)]


def valgrind() -> str:
    """The valgrind executable, or exit saying how to install it."""
    found = shutil.which("valgrind")
    if found is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    return found


@dataclass(frozen=True, slots=True)
class Instructions:
    """Instructions per span of each stage measured, over ``spans`` spans."""

    per_span: dict[str, int]
    spans: int
    hot_path: str


def measure(copies: int, names: Sequence[str], history: bool = False) -> Instructions:
    """Instructions per span of each stage (all stages when ``names`` is empty); with
    ``history``, on requests whose model calls carry the run's turns in their input."""
    with tempfile.TemporaryDirectory(prefix="toolwatch-instructions-") as tmp:
        prefix, record_path = Path(tmp) / "callgrind.out", Path(tmp) / "record.json"
        command = [
            valgrind(),
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--toggle-collect={_MARKER}",
            f"--dump-after={_MARKER}",
            f"--callgrind-out-file={prefix}",
            sys.executable,
            "-m",
            "bench.instructions",
            "--child",
            str(record_path),
            "--copies",
            str(copies),
            *(f"--stage={name}" for name in names),
            *(["--history"] if history else []),
        ]
        # A fixed hash seed: string hashes decide dict and set layouts, hence collisions.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        run = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        if run.returncode != 0:
            raise SystemExit(f"the measured run failed ({run.returncode}):\n{run.stderr[-2000:]}")
        record = json.loads(record_path.read_text())
        totals = _parts(prefix, len(record["stages"]))
    spans = record["spans"]
    per_span = {n: round(t / spans) for n, t in zip(record["stages"], totals, strict=True)}
    return Instructions(per_span, spans, record["hot_path"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--copies", type=int, default=1, help="renderings of the request pool")
    parser.add_argument("--stage", action="append", default=[], help="only this stage (repeat)")
    parser.add_argument("--out", type=Path, help="also write the result here as JSON")
    parser.add_argument(
        "--history",
        action="store_true",
        help="each model call's input holds the run's turns before it (content capture on)",
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child, args.copies, args.stage, args.history)
        return 0
    result = measure(args.copies, args.stage, args.history)
    print(f"instructions per span ({result.spans} spans; hot path {result.hot_path}):")
    for name, count in result.per_span.items():
        print(f"  {name:<15} {count:>10,}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dataclasses.asdict(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
