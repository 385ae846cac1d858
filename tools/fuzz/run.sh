#!/usr/bin/env bash
# make fuzz [FUZZ_SECONDS=300] [FUZZ_SEED=1] [FUZZ_BODIES=N]: the compiled scanner under ASan + UBSan, fuzzed against
# protobuf (tools/fuzz/scanner.py). Needs gcc with libasan/libubsan (Debian's gcc has both).
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${PYTHON:-.venv/bin/python}"
seconds="${FUZZ_SECONDS:-300}"
seed="${FUZZ_SEED:-1}"
bodies="${FUZZ_BODIES:-0}"  # 0: as many as the time allows
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
so="$scratch/_wire$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
include="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer -fPIC -shared -Wall -Wextra -Wno-missing-field-initializers \
    -I"$include" src/toolwatch/ingest/_wire.c -o "$so"
preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
# Python's own allocator hides use-after-free from ASan; leaks at exit are the interpreter's.
LD_PRELOAD="$preload" ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc \
    "$python" -m tools.fuzz.scanner "$so" "$seconds" "$seed" "$bodies"
