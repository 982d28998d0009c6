#!/usr/bin/env bash
# session 9: GPU tests (TESTS, one pytest process per file, through bench/gpu_session8b.sh), then
# bench/gpu_session9a.sh's compile profiles (CASES) when PROFILE=1
set -u
CASES= BENCH= bash bench/gpu_session8b.sh
[ "${PROFILE:-0}" = 1 ] && bash bench/gpu_session9a.sh
exit 0
