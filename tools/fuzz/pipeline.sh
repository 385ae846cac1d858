#!/usr/bin/env bash
# make fuzz [FUZZ_SECONDS=300] [FUZZ_SEED=1] [FUZZ_RUNS=N]: the whole pipeline under atheris
# (libFuzzer, guided by Python coverage; tools/fuzz/pipeline.py). The corpus grows in $FUZZ_DIR
# between runs; an input that breaks the contract is saved there as crash-<sha1> and fails the
# run. FUZZ_RUNS stops it after N inputs (FUZZ_SECONDS still bounds it): the same work
# whatever else the machine is doing.
set -euo pipefail
# Coverage guides libFuzzer only through Python code, so by default the hot path runs from
# its source (toolwatch.compiled); TOOLWATCH_PURE_PYTHON=0 fuzzes the compiled build instead.
export TOOLWATCH_PURE_PYTHON="${TOOLWATCH_PURE_PYTHON:-1}"
cd "$(dirname "$0")/../.."
python="${PYTHON:-.venv/bin/python}"
seconds="${FUZZ_SECONDS:-300}"
seed="${FUZZ_SEED:-1}"
dir="${FUZZ_DIR:-.fuzz}"
mkdir -p "$dir/pipeline-corpus"
"$python" -m tools.fuzz.corpus "$dir/pipeline-corpus"
runs=()
if [[ -n "${FUZZ_RUNS:-}" ]]; then runs=(-runs="$FUZZ_RUNS"); fi
"$python" -m tools.fuzz.pipeline -max_total_time="$seconds" -seed="$seed" -timeout=30 "${runs[@]}" \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$dir/" "$dir/pipeline-corpus"
