#!/usr/bin/env bash
# How the committed GPU results were produced: on a GPU machine with torch and triton but without jupyter or
# nbgrader (the H200 image), bring the wheels of ../shared/gpu-wheels.txt in .whl/ (COURSE_SPEC §8), then
#   bash benchmarks/run_on_gpu.sh OUT_DIR [tests|tune|bench|checks|notebooks|seeds|class ...]
# Each stage writes its log (and results) under OUT_DIR. Stages that time things (tune, bench, checks with their
# speed check, notebooks) run one at a time so that each has the GPU to itself.
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
    checks)     for lesson in ${LESSONS:-$(python3 -c "from grader.lessons import LESSONS; print(*LESSONS)")}; do
                  python3 -m grader fill "$lesson" --out "/tmp/$lesson.ipynb" > /dev/null
                  timeout ${CHECK_TIMEOUT:-300} python3 -m grader check "$lesson" "/tmp/$lesson.ipynb" --mode gpu > "$OUT/check_$lesson.txt" 2>&1
                done ;;
    seeds)      timeout ${SEEDS_TIMEOUT:-300} python3 tests/fresh_seeds.py --mode gpu --repeat ${REPEAT:-20} --jobs ${JOBS:-6} \
                  --out "$OUT/fresh_seeds_gpu.txt" > "$OUT/seeds.log" 2>&1 ;;
    class)      timeout ${CLASS_TIMEOUT:-580} python3 tests/class_scale.py --out /tmp/class --parallel ${JOBS:-10} > "$OUT/class_scale.log" 2>&1
                cp /tmp/class/class_scale.txt "$OUT/" 2>/dev/null ;;
    notebooks)  for nb in ${NOTEBOOKS:-03_per_query_kernel 04_tiled_kernel_2d 05_flash_attention_v2}; do
                  timeout ${NB_TIMEOUT:-240} jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 \
                    --output-dir "$OUT" "solutions/$nb.ipynb" > "$OUT/nb-$nb.log" 2>&1 || echo "FAILED $nb" >> "$OUT/nb-$nb.log"
                done ;;
  esac
  echo "stage $stage: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu.txt"
done
