#!/usr/bin/env bash
# Lesson 06 (flash-decoding) on a GPU, in one go; everything it writes goes under OUT_DIR:
#   bash benchmarks/lesson06_gpu.sh OUT_DIR            # on the H200: about 5 minutes, at most 8 (the stage timeouts)
#   DRY=1 bash benchmarks/lesson06_gpu.sh OUT_DIR      # on a CPU: every stage in Triton's interpreter, tiny shapes
#   STAGES="check mutants" bash benchmarks/lesson06_gpu.sh OUT_DIR   # some stages only (check mutants tune bench)
# Stages, each with a timeout and its log in OUT_DIR:
#   a. grader check of the reference solution in gpu mode (check_06_flash_decoding.txt), then the lesson's wrong
#      submissions graded in gpu mode, KILLED/SURVIVED per mutant (mutants_06_gpu.txt);
#   b. benchmarks/tune_lesson06.py: the tile table and the split rule's WAVES, every candidate checked for
#      correctness first (tune_lesson06.txt);
#   c. benchmarks/bench_decode.py: COURSE_SPEC §7's decode grid against SDPA flash/cuDNN/math and the read probe
#      (bench_decode.txt, decode_results.json, decode_results_cudagraph.json, decode_ragged.json, decode_summary.md,
#      decode_gbps_hkv8.png, decode_gbps_hkv32.png, and results.json = benchmarks/results.json with the decode rows
#      replaced; on the GPU the script also updates benchmarks/ in this checkout).
# The H200 image has torch and triton but not nbformat: bring the wheels of ../shared/gpu-wheels.txt in .whl/
# (COURSE_SPEC §8, as benchmarks/run_on_gpu.sh does); only nbformat and its dependencies are needed here.
set -uo pipefail
OUT=${1:?usage: lesson06_gpu.sh OUT_DIR}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
STAGES=${STAGES:-check mutants tune bench}
if [ -z "${DRY:-}" ] && [ -d .whl ] && ! $PY -c "import nbformat" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -n "${DRY:-}" ]; then
  MODE=interpreter; DRYFLAG=--dry-run
  MUTANTS_ARGS=${MUTANTS_ARGS:---jobs 1 --only combine_max_only empty_chunk_nan page_table_ignored}
else
  MODE=gpu; DRYFLAG=
  MUTANTS_ARGS=${MUTANTS_ARGS:---jobs 6}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt" 2>&1
fi
$PY -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)" \
  | tee -a "$OUT/gpu.txt"
stage() {  # stage NAME TIMEOUT LOG COMMAND...: run with a timeout, log, and say how long it took and how it ended
  local name=$1 limit=$2 log=$3; shift 3
  case " $STAGES " in *" $name "*) ;; *) return ;; esac
  local start=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  local rc=$?
  local verdict="ok"; [ $rc -eq 124 ] && verdict="TIMED OUT after $limit s"; [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict="exit $rc"
  echo "stage $name: $(( $(date +%s) - start )) s, $verdict (log: $log)" | tee -a "$OUT/gpu.txt"
  tail -n ${TAIL:-3} "$OUT/$log" | sed 's/^/    /'
}
$PY -m grader fill 06_flash_decoding --out /tmp/06_flash_decoding_filled.ipynb > /dev/null
stage check   ${CHECK_TIMEOUT:-150}   check_06_flash_decoding.txt \
  $PY -m grader check 06_flash_decoding /tmp/06_flash_decoding_filled.ipynb --mode $MODE
stage mutants ${MUTANTS_TIMEOUT:-150} mutants_06_$MODE.txt $PY -m benchmarks.lesson06_mutants --mode $MODE $MUTANTS_ARGS
stage tune    ${TUNE_TIMEOUT:-105}    tune_lesson06.txt $PY benchmarks/tune_lesson06.py $DRYFLAG
stage bench   ${BENCH_TIMEOUT:-75}   bench_decode.txt $PY -m benchmarks.bench_decode --out "$OUT" $DRYFLAG
