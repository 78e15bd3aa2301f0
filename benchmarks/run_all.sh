#!/usr/bin/env bash
# Run every benchmark in benchmarks/ in sequence; each script's output goes to $OUT/<name>.txt.
#
#   benchmarks/run_all.sh                    # all of them (about 6-10 min on 2 quiet cores)
#   benchmarks/run_all.sh convert verify     # only these (names below)
#   QUICK=1 benchmarks/run_all.sh            # fewer runs: checks that everything works
#
# Environment:
#   OUT           where the tables go (default /tmp/panelpack-bench); nothing is written in the repo
#   PYTHON        interpreter with panelpack installed (default: python from PATH)
#   BENCH_PYTHON  interpreter with llama-cpp-python (default /work/bench-venv/bin/python); the
#                 llama.cpp baselines are skipped, with a message, when it is absent
#   NUMBA_CACHE_DIR  numba cache for the warm runs (default $OUT/numba-cache)
#   PANELPACK_GEMMA_GGUF  Gemma 3 270M GGUF (default: assembled from its PyPI package)
#
# Names: gguf_open safetensors codecs repack gemv convert verify
# Run it on an otherwise idle machine: every table also records the load average.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
OUT="${OUT:-/tmp/panelpack-bench}"
PYTHON="${PYTHON:-python}"
BENCH_PYTHON="${BENCH_PYTHON:-/work/bench-venv/bin/python}"
QUICK="${QUICK:-0}"
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$OUT/numba-cache}"
mkdir -p "$OUT" "$NUMBA_CACHE_DIR"
cd "$repo"

loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a; }

{
    echo "# panelpack benchmarks, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 -E '^(model name|Model)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
    echo "memory: $(grep -m1 MemTotal /proc/meminfo 2>/dev/null | awk '{printf "%.1f GB", $2/1e6}')"
    echo "load average before: $(loadavg)"
    echo "python: $("$PYTHON" -c 'import sys; print(sys.version.split()[0], sys.executable)')"
    echo "panelpack: $("$PYTHON" -c 'import panelpack; print(panelpack.__version__)' 2>&1 | tail -1)" \
         "(git $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')," \
         "$(git -C "$repo" status --porcelain 2>/dev/null | wc -l) changed files)"
    echo "numba cache: $NUMBA_CACHE_DIR; output: $OUT"
} | tee "$OUT/machine.txt"

llama_args=(--bench-python "")
if [ -x "$BENCH_PYTHON" ] && "$BENCH_PYTHON" -c 'import llama_cpp' 2>/dev/null; then
    echo "llama.cpp baseline: llama-cpp-python $("$BENCH_PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)') in $BENCH_PYTHON" | tee -a "$OUT/machine.txt"
    llama_args=(--bench-python "$BENCH_PYTHON")
else
    echo "llama.cpp baseline: SKIPPED ($BENCH_PYTHON with llama-cpp-python not found; see benchmarks/README.md)" | tee -a "$OUT/machine.txt"
fi

if [ "$QUICK" = 1 ]; then
    A_gguf_open=(--runs 3 --skip-gguf-py); A_safetensors=(--runs 2); A_codecs=(--rows 512 --runs 3 --skip-gguf-py)
    A_repack=(--n 1024 --repeat 3); A_gemv=(--rounds 2 --repeats 5)
    A_convert=(--runs 2 --rss-runs 1 --demo-warm-runs 1); A_verify=(--runs 1)
else
    A_gguf_open=(); A_safetensors=(); A_codecs=(); A_repack=(); A_gemv=(--m 1 16)
    A_convert=(--runs 7 --rss-runs 3 --demo-warm-runs 3); A_verify=(--runs 3 --models gemma smollm2)
fi

all=(gguf_open safetensors codecs repack gemv convert verify)
selected=("$@")
[ ${#selected[@]} -eq 0 ] && selected=("${all[@]}")

failed=()
summary=()
for name in "${selected[@]}"; do
    case "$name" in
        gguf_open)   cmd=("$PYTHON" benchmarks/bench_gguf_open.py "${A_gguf_open[@]}") ;;
        safetensors) cmd=("$PYTHON" benchmarks/bench_safetensors.py "${A_safetensors[@]}") ;;
        codecs)      cmd=("$PYTHON" benchmarks/bench_codecs.py "${A_codecs[@]}") ;;
        repack)      cmd=("$PYTHON" benchmarks/bench_repack.py "${A_repack[@]}") ;;
        gemv)        cmd=("$PYTHON" benchmarks/bench_gemv.py "${A_gemv[@]}") ;;
        convert)     cmd=("$PYTHON" benchmarks/bench_convert.py "${A_convert[@]}" "${llama_args[@]}") ;;
        verify)      cmd=("$PYTHON" benchmarks/bench_verify.py "${A_verify[@]}") ;;
        *) echo "run_all.sh: unknown benchmark '$name' (known: ${all[*]})" >&2; exit 2 ;;
    esac
    echo
    echo "=== $name: ${cmd[*]}"
    l0="$(loadavg)"
    t0=$(date +%s)
    {
        echo "# ${cmd[*]}"
        echo "# load average before: $l0"
        "${cmd[@]}" 2>&1
        rc=$?
        echo "# load average after: $(loadavg); exit $rc"
        exit $rc
    } | tee "$OUT/$name.txt"
    rc=${PIPESTATUS[0]}
    dt=$(( $(date +%s) - t0 ))
    summary+=("$(printf '%-12s exit %-3s %5ss  load %s -> %s' "$name" "$rc" "$dt" "$l0" "$(loadavg)")")
    [ "$rc" -ne 0 ] && failed+=("$name")
done

echo
echo "=== summary (tables in $OUT)"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
echo "load average after: $(loadavg)" | tee -a "$OUT/summary.txt"
if [ ${#failed[@]} -ne 0 ]; then
    echo "FAILED: ${failed[*]}" | tee -a "$OUT/summary.txt"
    exit 1
fi
