#!/usr/bin/env bash
# The GPU checks in one go, for a lent CUDA machine: the `cuda` tests, then every benchmark
# that takes `--device cuda`, at the sizes below, most important first.  Each benchmark writes
# its figures to $RESULTS/gpu_<name>.json (default benchmarks/results), which
# `python benchmarks/render_results.py` adds to RESULTS.md.
# Each step gets its own time limit and the whole run a deadline, so one slow step costs only
# itself.  Logs go to $LOGDIR (default ./cuda-logs).
#
#     bash benchmarks/run_cuda.sh [SECONDS]     # deadline, default 540
#
# The lent machines have torch, scikit-learn, pandas and pyarrow but not skorch (a core
# dependency) nor the optional skops, faiss, Dask, LanceDB or Chroma: bring their wheels in
# ./.whl (skorch, skops, faiss-cpu, dask, distributed and what they need) and this script
# installs them into the interpreter itself, not into a --target folder on PYTHONPATH: the
# command-line tests start subprocesses with PYTHONPATH set to the checkout alone, and
# would not see a --target folder (2026-11-27: 8 such failures, no other).  Steps 1-4
# fit one call of a 15-minute session; the rest run only while the deadline allows.
set -u
DEADLINE=$((SECONDS + ${1:-540}))
LOGDIR=${LOGDIR:-cuda-logs}
RESULTS=${RESULTS:-benchmarks/results}
PY=${PYTHON:-python3}
mkdir -p "$LOGDIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl \
        >>"$LOGDIR/bench.log" 2>&1
fi

step() {  # step NAME LIMIT COMMAND...
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS - 5))
    if ((left < 15)); then
        echo "== $name: skipped (deadline)" | tee -a "$LOGDIR/summary.log"
        return
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit ${limit}s): $*" | tee -a "$LOGDIR/bench.log"
    local start=$SECONDS
    # SIGINT: a step stopped at its limit prints the traceback of where it was.
    timeout -s INT "$limit" "$@" >>"$LOGDIR/bench.log" 2>&1
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - start)) s" | tee -a "$LOGDIR/summary.log" "$LOGDIR/bench.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$LOGDIR/summary.log" 2>&1
$PY -c "import torch, sklearn, numpy; print('torch', torch.__version__, 'sklearn',
sklearn.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())" \
    >>"$LOGDIR/summary.log" 2>&1

# 1. The GPU tests, and the tests that once failed on a GPU (batch-size invariance of the
#    CLI, float32 tolerances of Dask, CSV floats).
step cuda-tests 90 $PY -m pytest -q -p no:cacheprovider -p no:benchmark -n 8 --tb=short -rfE \
    -m cuda tests
step gpu-regressions 60 $PY -m pytest -q -p no:cacheprovider -p no:benchmark -n 8 --tb=short -rfE \
    tests/test_cli.py::test_transform_in_small_batches_matches_one_batch \
    tests/test_dask.py::test_transform_is_lazy_and_matches_numpy tests/test_io.py \
    tests/test_io_layouts.py
# 2. A LambdaOrth epoch of 1M x 1,024 against the profiler's kernel time of its steps.
step lambda-step 120 $PY benchmarks/bench_lambda_step.py --n 1000000 --d 1024 \
    --json "$RESULTS/gpu_lambda_step.json"
# 3. The default's fit_intercept choice against the explicit setting, default epochs.
step intercept-cost 150 $PY benchmarks/lambda_intercept_choice.py --skip-choice --skip-previous \
    --repeats 1 --rows 200000 --dim 1024 --json "$RESULTS/gpu_lambda_intercept_cost.json"
# 4. The whole suite with a GPU present: every device="auto" default then runs on CUDA.
step suite 240 $PY -m pytest -q -p no:cacheprovider -p no:benchmark -n 14 --tb=short -rfE tests
# 5. Figures measured on 2026-11-26 (RESULTS.md), refreshed when time is left.
step procrustes 90 $PY benchmarks/bench_procrustes.py --device cuda --n 1000000 --d 1024 --no-scipy \
    --json "$RESULTS/gpu_procrustes.json"
step relative 120 $PY benchmarks/bench_relative.py --device cuda --n 1000000 --d 1024 --m 512 \
    --repeats 2 --json "$RESULTS/gpu_relative.json"
step affine 40 $PY benchmarks/bench_affine.py --device cuda --json "$RESULTS/gpu_affine.json"
step metrics 30 $PY benchmarks/metrics_speed.py --n 100000 --no-reference --skip-map --device cuda \
    --json "$RESULTS/gpu_metrics_speed.json"
step lambda-path 100 $PY benchmarks/bench_lambda_path.py --synthetic --n 200000 --d 512 \
    --device cuda --json "$RESULTS/gpu_lambda_path.json"
exit 0
