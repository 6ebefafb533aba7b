#!/usr/bin/env bash
# One device check for whoever holds a GPU, each step under ten minutes (about 35 in all), every log in one folder:
#   1. the GPU tests: tests/test_gpu.py on CUDA (each kernel against its NumPy twin too, Viterbi with actions'
#      row shifts among them), the GPU column of the engines matrix and the GPU cases of the cognitive maps
#      (tests/test_actions.py: batch and online EM, Viterbi with actions) (pytest -m gpu);
#   2. bench/bench_gpu.py --states 30000 (needs milton-paradise.txt and melville-moby_dick.txt in $CHMM_CORPORA,
#      default ../shared/corpora; skipped with a note when they are missing);
#   3. bench/bench_gpu.py --lockstep 30000: the lockstep kernels on float16 blocks by rows per work item and loads in
#      flight per lane (1, 4, 8),
#      and --precision-bps 10000: the training BPS after 20 lockstep batch-EM iterations, float16 against float32, on
#      three corpora (carroll-alice.txt too);
#   4. the plain `chmm train CORPUS --backend gpu` on Calgary, Tiny Shakespeare, Moby Dick (budget 4) and War and Peace
#      (budget 5), each step under ten minutes (bench/bench_defaults.py: test BPS, states and minutes beside our n-gram);
#   5. bench/bench_online_batches.py on War and Peace at 10,000 states: where an online epoch's seconds go (cProfile
#      over 300 batches), then online EM's batch (1, 4 and 16 times the
#      automatic one) against its seconds per epoch and the validation BPS it leaves batch EM;
#   6. one `chmm train --backend gpu --algorithm online` run on the bundled carroll-alice.txt.
# Usage: bench/device_check.sh [OUT_DIR]   (default: $OUT/device-check when $OUT is set, else bench/out/device-check)
# Needs the project installed with its gpu and test extras (pip install -e ".[gpu,test]"); the summary is
# OUT_DIR/summary.txt, one line per step with its exit status and seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-${OUT:+$OUT/device-check}}"
DIR="${DIR:-bench/out/device-check}"
mkdir -p "$DIR"
PYTHON="${PYTHON:-python}"
CORPORA="${CHMM_CORPORA:-../shared/corpora}"
: > "$DIR/summary.txt"

step() {  # step NAME LIMIT_SECONDS COMMAND...: run with a time limit, log to DIR/NAME.log, one summary line
    local name="$1" limit="$2"
    shift 2
    local started=$SECONDS
    timeout "$limit" "$@" > "$DIR/$name.log" 2>&1
    local status=$?
    echo "$name: exit $status in $((SECONDS - started)) s" | tee -a "$DIR/summary.txt"
}

{
    date -u
    git rev-parse HEAD 2>/dev/null
    nvidia-smi 2>&1 | head -15
    "$PYTHON" -c "import cupy; print('cupy', cupy.__version__)" 2>&1
} > "$DIR/machine.log"

step tests 180 "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py tests/test_engines.py tests/test_actions.py
if [ -f "$CORPORA/milton-paradise.txt" ] && [ -f "$CORPORA/melville-moby_dick.txt" ]; then
    step bench_gpu 150 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_gpu.py --states 30000 --json "$DIR/bench_gpu.json"
else
    echo "bench_gpu: skipped, milton-paradise.txt and melville-moby_dick.txt are not in $CORPORA" | tee -a "$DIR/summary.txt"
fi
if [ -f "$CORPORA/milton-paradise.txt" ] && [ -f "$CORPORA/melville-moby_dick.txt" ]; then
    step lockstep 300 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_gpu.py --lockstep 30000 --rows 64 128 \
        --loads 1 4 8 --precisions float16 --forward-chunks 64:100 1024:50 --em-chunks 2048:50 \
        --json "$DIR/lockstep.json"
    step precision_bps 200 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_gpu.py --precision-bps 10000 \
        --corpora-names carroll-alice milton-paradise melville-moby_dick --json "$DIR/precision_bps.json"
fi
for corpus in calgary-book1 tiny-shakespeare melville-moby_dick war-and-peace; do  # the plain command on a GPU
    if [ -f "$CORPORA/$corpus.txt" ]; then  # budgets that end each step in under ten minutes (War and Peace: 4.9 min at 3)
        budget=4
        if [ "$corpus" = war-and-peace ]; then budget=5; fi
        step "defaults_gpu_$corpus" 590 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_defaults.py --backend gpu \
            --only "$corpus" --budget "$budget" --out "$DIR"
    fi
done
if [ -f "$CORPORA/war-and-peace.txt" ]; then  # online EM's batch on a GPU: seconds per epoch against what it hands over
    step online_profile 240 "$PYTHON" bench/bench_online_batches.py "$CORPORA/war-and-peace.txt" --states 10000 \
        --profile 300 --backend gpu
    step online_batches 590 "$PYTHON" bench/bench_online_batches.py "$CORPORA/war-and-peace.txt" --states 10000 \
        --scales 1 4 16 --iterations 6 --backend gpu --json "$DIR/online_batches.json"
fi
step train_online 90 "$PYTHON" -m engine.cli train tests/data/carroll-alice.txt -o "$DIR/alice-gpu.npz" \
    --backend gpu --algorithm online --states 3000 --restarts 1 --iterations 5 --json
