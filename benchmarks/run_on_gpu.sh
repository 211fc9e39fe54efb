#!/usr/bin/env bash
# Everything the course runs on a GPU machine, by stage, each stage's log (and results) under OUT_DIR:
#   bash benchmarks/run_on_gpu.sh OUT_DIR STAGE...
# Stages:
#   tests[:I/N]       make test-gpu (part I of N): the tests that share the GPU side by side, then the timing tests alone
#                     (test_gpu_partI.txt, test_gpu_partI-shared.xml, test_gpu_partI-alone.xml)
#   solutions[:LANG]  make solutions for lessons 03-06 (LANG en or zh; default both): the executed notebooks in
#                     OUT_DIR/solutions/ (solutions.txt)
#   decode            lesson 06's decode grid (benchmarks/bench_decode.py): results.json with the decode rows, summary,
#                     plots (decode.txt and the files it writes)
#   waves             lesson 06's GB/s against num_splits around one wave of programs (waves.txt)
#   mutation          the interpreter's surviving mutants graded in gpu mode (mutation_gpu.txt)
#   select            the tests of FILES (default tests/test_lessons.py) that match the pytest expression SELECT, in gpu
#                     mode, side by side (select.txt, select.xml): the new checks and mutants of a change
#   mutants:NAME      the one-token mutants of LESSONS graded in interpreter mode on this machine's many cores, JOBS at
#                     once (make mutation-score's work, faster): verdicts_NAME.json, which `tests/mutation.py
#                     --reuse-verdicts` turns into tests/reports/mutation_interpreter.txt (mutants_NAME.log); REUSE=
#                     names verdict files whose mutants are not graded again
#   stages:NAME       where grading time goes (benchmarks/grading_stages.py --mode gpu): grading_stages_NAME.txt and
#                     the timings of every worker and check, profile_NAME.jsonl
#   cli               `python -m grader check` of each lesson's reference, one after another, timed whole (judge start
#                     included): cli.txt
#   tune, bench, checks, seeds, class: lesson 05's tuner, the TFLOP/s benchmark, each reference graded, fresh seeds,
#                     a sample class (as before)
# The H200 image has numpy 2.5, which breaks Triton 3.6's interpreter (the memory check and interpreter mode run there):
# carry numpy 2.3.5 in .whl too. A machine like the H200 image has torch and triton but neither jupyter nor nbgrader nor a package index: bring the
# wheels of ../shared/gpu-wheels.txt in .whl/ and bubblewrap in .tools/bin/bwrap (COURSE_SPEC §8); both are carried.
# Stages that time things run one at a time, so that each has the GPU to itself.
set -uo pipefail
OUT=${1:?usage: run_on_gpu.sh OUT_DIR STAGE...}; shift
mkdir -p "$OUT"
# pip --target puts the wheels' data files (nbconvert's HTML templates, which nbgrader's feedback needs) in
# /tmp/site/share/jupyter, where Jupyter looks only when JUPYTER_PATH says so.
if [ ! -d /tmp/site/nbgrader ] && [ -d .whl ] && ! python3 -c "import nbgrader" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
if [ -d /tmp/site/nbgrader ]; then
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -x .tools/bin/bwrap ]; then
  export FA_BWRAP=$PWD/.tools/bin/bwrap FA_SANDBOX=require  # every check in the sandbox, or an error
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)" | tee -a "$OUT/gpu.txt"
python3 -c "from grader import sandbox; print('sandbox (gpu mode):', sandbox.status('gpu'))" | tee -a "$OUT/gpu.txt"
[ -n "${FA_COMMIT:-}" ] && echo "commit $FA_COMMIT" | tee -a "$OUT/gpu.txt"  # the copy on a device machine may have no .git
for stage in "$@"; do
  start=$(date +%s)
  name=${stage%%:*}; arg=${stage#*:}; [ "$arg" = "$stage" ] && arg=
  case $name in
    tests)      part=${arg:+_part${arg%%/*}}
                PY=python3 PART=$arg JUNIT="$OUT/test_gpu$part" timeout ${TESTS_TIMEOUT:-560} bash tests/gpu_suite.sh \
                  2>&1 | tee "$OUT/test_gpu$part.txt" | grep -E "^(FAILED|ERROR)|passed|failed" ;;
    solutions)  timeout ${SOLUTIONS_TIMEOUT:-580} python3 -m grader run-solutions --out "$OUT/solutions" \
                  --lesson ${LESSONS:-03_per_query_kernel 04_tiled_kernel_2d 05_flash_attention_v2 06_flash_decoding} \
                  ${arg:+--language $arg} 2>&1 | tee "$OUT/solutions${arg:+_$arg}.txt" ;;
    decode)     timeout ${DECODE_TIMEOUT:-150} python3 -m benchmarks.bench_decode --out "$OUT/decode" \
                  > "$OUT/decode.txt" 2>&1; tail -3 "$OUT/decode.txt" ;;
    waves)      timeout ${WAVES_TIMEOUT:-120} python3 -m benchmarks.lesson06_waves > "$OUT/waves.txt" 2>&1; cat "$OUT/waves.txt" ;;
    mutation)   timeout ${MUTATION_TIMEOUT:-400} python3 tests/mutation.py --mode gpu --jobs ${JOBS:-8} \
                  --only-ids tests/reports/mutation_interpreter_survivors.txt --out "$OUT/mutation_gpu.txt" \
                  --survivors-out "$OUT/mutation_gpu_survivors.txt" > "$OUT/mutation.log" 2>&1; tail -15 "$OUT/mutation.log" ;;
    select)     timeout ${SELECT_TIMEOUT:-400} python3 -m pytest -q -n ${GPU_TEST_JOBS:-8} --mode gpu -m "not cpu_only and not timing" -p no:cacheprovider \
                  ${FILES:-tests/test_lessons.py} -k "${SELECT:?a pytest -k expression}" --junitxml "$OUT/select.xml" \
                  > "$OUT/select.txt" 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/select.txt" ;;
    mutants)    OMP_NUM_THREADS=1 timeout ${MUTANTS_TIMEOUT:-540} python3 tests/mutation.py --mode interpreter \
                  --jobs ${JOBS:-15} --trust-reference --lessons ${LESSONS:?name the lessons} \
                  ${REUSE:+--reuse-verdicts $REUSE} --save-verdicts "$OUT/verdicts_$arg.json" > "$OUT/mutants_$arg.log" 2>&1; tail -4 "$OUT/mutants_$arg.log" ;;
    stages)     timeout ${STAGES_TIMEOUT:-400} python3 benchmarks/grading_stages.py --mode gpu --repeat ${REPEAT:-1} \
                  --skip nbgrader ${STAGES_SKIP:-} --title "${FA_COMMIT:-}" --out "$OUT/grading_stages_$arg.txt" \
                  --profile "$OUT/profile_$arg.jsonl" > "$OUT/stages_$arg.log" 2>&1; cat "$OUT/grading_stages_$arg.txt" ;;
    cli)        for lesson in ${LESSONS:-$(python3 -c "from grader.lessons import LESSONS; print(*LESSONS)")}; do
                  python3 -m grader fill "$lesson" --out "/tmp/$lesson.ipynb" > /dev/null
                  s=$(date +%s.%N); timeout ${CHECK_TIMEOUT:-300} python3 -m grader check "$lesson" "/tmp/$lesson.ipynb" \
                    --mode gpu > "/tmp/cli_$lesson.txt" 2>&1
                  echo "$lesson $(python3 -c "print(f'{$(date +%s.%N) - $s:.1f} s')") $(grep '^Score' /tmp/cli_$lesson.txt)" \
                    | tee -a "$OUT/cli.txt"
                done ;;
    tune)       timeout ${TUNE_TIMEOUT:-300} python3 benchmarks/tune_lesson05.py ${TUNE_ARGS:-} > "$OUT/tune.txt" 2>&1 ;;
    bench)      timeout ${BENCH_TIMEOUT:-360} python3 -m benchmarks.bench --out "$OUT" ${BENCH_ARGS:-} > "$OUT/bench.txt" 2>&1 ;;
    checks)     for lesson in ${LESSONS:-$(python3 -c "from grader.lessons import LESSONS; print(*LESSONS)")}; do
                  python3 -m grader fill "$lesson" --out "/tmp/$lesson.ipynb" > /dev/null
                  timeout ${CHECK_TIMEOUT:-300} python3 -m grader check "$lesson" "/tmp/$lesson.ipynb" --mode gpu > "$OUT/check_$lesson.txt" 2>&1
                done ;;
    seeds)      timeout ${SEEDS_TIMEOUT:-300} python3 tests/fresh_seeds.py --mode gpu --repeat ${REPEAT:-20} --jobs ${JOBS:-6} \
                  --out "$OUT/fresh_seeds_gpu.txt" > "$OUT/seeds.log" 2>&1 ;;
    class)      timeout ${CLASS_TIMEOUT:-580} python3 tests/class_scale.py --out /tmp/class --parallel ${JOBS:-10} > "$OUT/class_scale.log" 2>&1
                cp /tmp/class/class_scale.txt "$OUT/" 2>/dev/null; cp /tmp/class/profile.jsonl "$OUT/class_profile.jsonl" 2>/dev/null ;;
    *)          echo "unknown stage $stage" ;;
  esac
  echo "stage $stage: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu.txt"
done
