#!/usr/bin/env bash
# The device check for whoever holds a GPU, in parts that each fit one device call (under ten minutes), the open
# figures of issue 49 first, every log in one folder:
#   first (the default, 9.5 minutes at most; run it first):
#     1. the GPU tests: tests/test_gpu.py on CUDA (each kernel against its NumPy twin, the _rows2 lockstep kernels
#        among them), the GPU column of the engines matrix and the GPU cases of the cognitive maps (pytest -m gpu);
#     2. the forward goal (0.1 s over 42,297 symbols at 30,000 states): bench/bench_gpu.py --lockstep 30000 on float16
#        blocks, 64 rows per item, 4 or 8 loads in flight per lane, one or two rows in flight per warp, work items
#        taken in turn or as thread blocks come free, 32 and 64 chunks, and the batch-EM iteration over 750,000
#        symbols in 2,048 chunks with the same kernels;
#     3. where an online epoch's seconds go on War and Peace at 10,000 states (bench/bench_online_batches.py
#        --profile: 300 batches under cProfile; the pair_counts kernel's first measure).
#   war-and-peace (two calls, about 13 minutes): the plain `chmm train --backend gpu` on War and Peace with the default
#     budget (10 minutes of search, then the refit and the scores), beside our n-gram (bench/bench_defaults.py). The
#     run is started in its own process session, so that it outlives the call; each call waits for it up to about
#     9.5 minutes and copies what it has written so far. Call the part again at once (the machine stays warm 30 s)
#     to collect the rest; the summary says the run's exit status, or that it stopped without one.
#   With a lease of 15 minutes, first and war-and-peace each need a lease of their own.
#   rest (about 30 minutes, for a longer lease): bench/bench_gpu.py --states 30000, the training BPS on float16 blocks
#     against float32 (--precision-bps 10000), the plain command on Calgary, Tiny Shakespeare and Moby Dick (budget 4),
#     online EM's batch on War and Peace (1, 4 and 16 times the automatic one) and one online training on the bundled
#     carroll-alice.txt.
#   all: first, then rest.
# Usage: bench/device_check.sh [OUT_DIR] [PART]   (OUT_DIR default: $OUT/device-check when $OUT is set, else
# bench/out/device-check; PART default: first). Needs the project installed with its gpu and test extras
# (pip install -e ".[gpu,test]") and the corpora in $CHMM_CORPORA (default ../shared/corpora); a step whose corpora
# are missing is skipped with a note (a device machine gets only the checkout: copy the corpora into a folder the
# checkout ignores, carry it, and point $CHMM_CORPORA at it). The summary is OUT_DIR/summary.txt, one line per step
# with its exit status and seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-${OUT:+$OUT/device-check}}"
DIR="${DIR:-bench/out/device-check}"
PART="${2:-first}"
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

have() {  # have CORPUS...: every corpus is in $CORPORA, else one summary line saying which step is skipped
    local corpus
    for corpus in "${@:2}"; do
        if [ ! -f "$CORPORA/$corpus.txt" ]; then
            echo "$1: skipped, $corpus.txt is not in $CORPORA" | tee -a "$DIR/summary.txt"
            return 1
        fi
    done
}

first() {
    step tests 150 "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py tests/test_engines.py \
        tests/test_actions.py
    if have lockstep milton-paradise melville-moby_dick; then
        step lockstep 300 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_gpu.py --lockstep 30000 --rows 64 \
            --loads 4 8 --rows-in-flight 1 2 --dynamic 0 1 --precisions float16 --forward-chunks 32:100 64:100 \
            --em-chunks 2048:50 --json "$DIR/lockstep.json"
    fi
    if have online_profile war-and-peace; then
        step online_profile 120 "$PYTHON" bench/bench_online_batches.py "$CORPORA/war-and-peace.txt" \
            --states 10000 --profile 300 --backend gpu
    fi
}

war_and_peace() {  # the plain command at the default budget, in its own process session; wait, then copy its files
    have war_and_peace war-and-peace || return
    local run=/tmp/device-check-war-and-peace started=$SECONDS
    if [ ! -d "$run" ]; then  # the shell in the new session writes its own id, then the run's exit status
        mkdir -p "$run"
        setsid sh -c 'dir=$1; shift; echo $$ > "$dir/pid"; "$@" > "$dir/run.log" 2>&1 < /dev/null; echo $? > "$dir/rc"' \
            sh "$run" env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_defaults.py --backend gpu \
            --only war-and-peace --out "$run" < /dev/null > /dev/null 2>&1 &
        while [ ! -s "$run/pid" ] && [ $((SECONDS - started)) -lt 10 ]; do sleep 1; done
    fi
    while [ ! -f "$run/rc" ] && kill -0 "$(cat "$run/pid" 2>/dev/null)" 2>/dev/null \
        && [ $((SECONDS - started)) -lt 560 ]; do
        sleep 5
    done
    cp -r "$run/." "$DIR/"
    if [ -f "$run/rc" ]; then
        echo "war_and_peace: ended, exit $(cat "$run/rc"); its row is the last table line of run.log" \
            | tee -a "$DIR/summary.txt"
    elif kill -0 "$(cat "$run/pid" 2>/dev/null)" 2>/dev/null; then
        echo "war_and_peace: still running after $((SECONDS - started)) s; call this part again to collect it" \
            | tee -a "$DIR/summary.txt"
    else
        echo "war_and_peace: stopped without an exit status (killed with the call?); see run.log" \
            | tee -a "$DIR/summary.txt"
    fi
}

rest() {
    if have bench_gpu milton-paradise melville-moby_dick; then
        step bench_gpu 150 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_gpu.py --states 30000 \
            --json "$DIR/bench_gpu.json"
    fi
    if have precision_bps carroll-alice milton-paradise melville-moby_dick; then
        step precision_bps 200 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_gpu.py --precision-bps 10000 \
            --corpora-names carroll-alice milton-paradise melville-moby_dick --json "$DIR/precision_bps.json"
    fi
    for corpus in calgary-book1 tiny-shakespeare melville-moby_dick; do  # the plain command on a GPU, budget 4
        if have "defaults_gpu_$corpus" "$corpus"; then
            step "defaults_gpu_$corpus" 590 env CHMM_CORPORA="$CORPORA" "$PYTHON" bench/bench_defaults.py \
                --backend gpu --only "$corpus" --budget 4 --out "$DIR"
        fi
    done
    if have online_batches war-and-peace; then  # online EM's batch: seconds per epoch against what it hands over
        step online_batches 590 "$PYTHON" bench/bench_online_batches.py "$CORPORA/war-and-peace.txt" \
            --states 10000 --scales 1 4 16 --iterations 6 --backend gpu --json "$DIR/online_batches.json"
    fi
    step train_online 90 "$PYTHON" -m engine.cli train tests/data/carroll-alice.txt -o "$DIR/alice-gpu.npz" \
        --backend gpu --algorithm online --states 3000 --restarts 1 --iterations 5 --json
}

{
    date -u
    git rev-parse HEAD 2>/dev/null
    nvidia-smi 2>&1 | head -15
    "$PYTHON" -c "import cupy; print('cupy', cupy.__version__)" 2>&1
    echo "part: $PART"
} > "$DIR/machine.log"

case "$PART" in
    first) first ;;
    war-and-peace) war_and_peace ;;
    rest) rest ;;
    all) first; rest ;;
    *) echo "the part is one of first, war-and-peace, rest, all, not '$PART'" >&2; exit 2 ;;
esac
