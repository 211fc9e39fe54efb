#!/usr/bin/env bash
# The test-suite in GPU mode (make test-gpu; benchmarks/run_on_gpu.sh's `tests` stage), in two passes:
#   1. every test that does not time kernels, GPU_TEST_JOBS at a time (they share the GPU);
#   2. the tests marked `timing` (speed checks, wall-time bounds), one at a time, with the GPU to themselves.
# PART=I/N runs part I of N of both passes (tests/conftest.py --part). JUNIT=PREFIX writes PREFIX-shared.xml and
# PREFIX-alone.xml. PY is the python to run (default python3). Failing tests are listed by name (-rfEs).
# pytest's exit status 5 (no test in a pass of this part) is no failure.
set -u
PY=${PY:-python3}
JUNIT=${JUNIT:-test_gpu${PART:+_part${PART%%/*}}}
PARTS=${PART:+--part $PART}
status=0
$PY -m pytest -v --mode gpu -m "not cpu_only and not timing" -n "${GPU_TEST_JOBS:-12}" --dist worksteal -rfEs \
  -p no:cacheprovider --durations=15 --junitxml="$JUNIT-shared.xml" $PARTS ${PYTEST_ARGS:-}
rc=$?; [ $rc = 0 ] || [ $rc = 5 ] || status=1
$PY -m pytest -v --mode gpu -m "not cpu_only and timing" -rfEs -p no:cacheprovider --durations=15 \
  --junitxml="$JUNIT-alone.xml" $PARTS ${PYTEST_ARGS:-}
rc=$?; [ $rc = 0 ] || [ $rc = 5 ] || status=1
exit $status
