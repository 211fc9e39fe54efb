#!/usr/bin/env bash
# How the committed GPU results were produced: on a GPU machine with torch and triton but without jupyter or
# nbgrader (the H200 image), bring the wheels of ../shared/gpu-wheels.txt in .whl/ (COURSE_SPEC §8), then
#   bash benchmarks/run_on_gpu.sh OUT_DIR [tests|tune|bench|notebooks ...]
# Each stage writes its log (and results) under OUT_DIR.
set -uo pipefail
OUT=${1:?usage: run_on_gpu.sh OUT_DIR STAGE...}; shift
mkdir -p "$OUT"
if [ -d .whl ] && ! python3 -c "import nbgrader" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)" | tee -a "$OUT/gpu.txt"
for stage in "$@"; do
  start=$(date +%s)
  case $stage in
    tests)      timeout ${TESTS_TIMEOUT:-300} python3 -m pytest -q --mode gpu -n ${JOBS:-12} -p no:cacheprovider ${PYTEST_ARGS:-} 2>&1 | tail -60 > "$OUT/tests.txt" ;;
    tune)       timeout ${TUNE_TIMEOUT:-300} python3 benchmarks/tune_lesson05.py ${TUNE_ARGS:-} > "$OUT/tune.txt" 2>&1 ;;
    bench)      timeout ${BENCH_TIMEOUT:-360} python3 -m benchmarks.bench --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.txt" 2>&1 ;;
    notebooks)  for nb in ${NOTEBOOKS:-03_per_query_kernel 04_tiled_kernel_2d 05_flash_attention_v2}; do
                  timeout ${NB_TIMEOUT:-240} jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 \
                    --output-dir "$OUT" "solutions/$nb.ipynb" > "$OUT/nb-$nb.log" 2>&1 || echo "FAILED $nb" >> "$OUT/nb-$nb.log"
                done ;;
  esac
  echo "stage $stage: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu.txt"
done
