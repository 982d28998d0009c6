# Sourced by the device scripts (bench/gpu_session8*.sh): coil's wheels from .whl installed into
# /tmp/site, the environment every run there uses, and $OUT made.
#
# Bytecode (from session 11 on): the device machine sets PYTHONDONTWRITEBYTECODE=1 and its site
# packages (torch among them) carry no .pyc files, so every process there compiled the source of
# each module it imported (~3 ms a module; a warm first call imports hundreds lazily). A pip- or
# uv-installed environment has them after the first import. So Python here writes and reads
# bytecode under /tmp/pycache, compiled for every package once per machine before any
# measurement (NO_PYC=1 keeps the machine's setting).
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache
if [ -z "${NO_PYC:-}" ]; then
  unset PYTHONDONTWRITEBYTECODE
  export PYTHONPYCACHEPREFIX=/tmp/pycache
  if [ ! -e /tmp/pycache/.done ]; then
    t0=$(date +%s)
    python3 -m compileall -q -j 16 $(python3 -c "import site, sysconfig; print(sysconfig.get_paths()['stdlib'], *site.getsitepackages())") /tmp/site > /dev/null 2>&1
    touch /tmp/pycache/.done
    echo "bytecode compiled into /tmp/pycache in $(( $(date +%s) - t0 )) s"
  else
    python3 -m compileall -q -j 16 /tmp/site > /dev/null 2>&1  # coil's wheels are new each call
  fi
fi

# `micro_probe`: bench/micro_probe.py over $MICRO (micro case names; nothing when empty), its log
# in $OUT/micro.log and its summary lines printed
micro_probe() {
  [ -n "${MICRO:-}" ] || return 0
  timeout ${MICRO_S:-200} python3 bench/micro_probe.py $MICRO --out $OUT/micro > $OUT/micro.log 2>&1
  grep -v -i warn $OUT/micro.log | grep "^==\|^  \|Error" | cut -c1-300
}

# `old_wheels`: a second wheel set for an A/B, .whl_old installed into /tmp/site_old (bytecode
# compiled as above unless NO_PYC); fails when the install does
old_wheels() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_old .whl_old/*.whl || return 1
  [ -n "${NO_PYC:-}" ] || python3 -m compileall -q -j 16 /tmp/site_old > /dev/null 2>&1
  return 0
}

# `micro_ab TAG CASE...`: bench/micro_probe.py of the CASEs with the old wheels (old_wheels, called
# here) and this tree's, alternating, ROUNDS rounds (default 2), each with its own cache folder
# and output folder /tmp/mp-TAG-<site>-<round>; prints each probe's summary and tuning lines
micro_ab() {
  local tag=$1 round site s
  shift
  old_wheels || echo "no .whl_old"
  for round in $(seq ${ROUNDS:-2}); do
    for site in /tmp/site_old /tmp/site; do
      s=$(basename $site)
      echo "== round $round $s"
      PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-$tag-$s-$round timeout ${MICRO_S:-200} \
        python3 bench/micro_probe.py "$@" --out /tmp/mp-$tag-$s-$round 2>&1 \
        | grep -v -i warn | grep "^==\|^  \|Error\|autotune\|ms" | cut -c1-260 | head -${MICRO_LINES:-60}
    done
  done
}

# `train_ab CASE...`: coil's step time of each training CASE (bench/train_step_time.py) with the
# old wheels (old_wheels, called here) and this tree's, alternating, ROUNDS rounds (default 2);
# one cache folder per case and wheel set, so later rounds start warm; prints one line a run
train_ab() {
  local case round site
  old_wheels || echo "no .whl_old"
  for case in "$@"; do
    for round in $(seq ${ROUNDS:-2}); do
      for site in /tmp/site_old /tmp/site; do
        PYTHONPATH=$site COIL_CACHE_DIR=/tmp/coil-cache-$case-$(basename $site) timeout ${TIME_S:-150} \
          python3 bench/train_step_time.py $case $(basename $site) 2>&1 | tail -1
      done
    done
  done
}

# `micro_bench DIR`: `coil bench micro` (all 16 cases beside Inductor) written to DIR; prints how
# many cases finished and, per case, Inductor's and coil's ms, their ratio, coil's % of the copy
# bandwidth and its accuracy verdict
micro_bench() {
  timeout ${MICRO_BENCH_S:-200} python3 -m coil.backend.cli bench micro --out $1 --budget-s 2000 2>&1 | grep -c "done in"
  python3 - $1/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n = 0
for name, r in d["cases"].items():
    i, c = r["inductor"]["ms"], r["coil"]["ms"]
    n += c <= i
    print(f"  {name:22s} ind {i:.4f} coil {c:.4f} ratio {c / i:.3f} copy% {r['coil']['pct_copy']:.0f} acc {r['coil']['accuracy_ok']}")
print(f"  coil <= inductor on {n} of {len(d['cases'])}; copy GB/s {d['copy_gbs']}")
PY
}

# `micro_rounds DIR`: `coil bench micro --rounds ROUNDS` (default 5; all 16 cases beside Inductor,
# interleaved timing rounds) written to DIR; prints how many cases finished, per case Inductor's
# and coil's median ms, their ratio, coil / Inductor in each round and in how many coil was not
# slower, coil's % of the copy bandwidth and both accuracy verdicts, then the issue-5 lines
micro_rounds() {
  timeout ${MICRO_BENCH_S:-300} python3 -m coil.backend.cli bench micro --rounds ${ROUNDS:-5} --out $1 --budget-s 2000 2>&1 | grep -c "done in"
  python3 - $1/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    i, c, p = r["inductor"], r["coil"], r.get("coil_vs_inductor", {})
    print(f"  {name:22s} ind {i['ms']:.4f} coil {c['ms']:.4f} ratio {c['ms'] / i['ms']:.3f} "
          f"round ratios {' '.join(f'{x:.3f}' for x in p.get('ratios', []))} not slower {p.get('a_not_slower')}/{p.get('rounds')} "
          f"copy% {c['pct_copy']:.0f} acc {c['accuracy_ok']}/{i['accuracy_ok']}")
print(f"  copy GB/s {d['copy_gbs']}")
PY
  grep -A3 "Issue-5 targets" $1/bench.md
}

# `warm_ab CASE...`: coil's warm first call of each CASE (bench/compile_profile.py --case) with
# the old wheels (old_wheels, called here) and this tree's: one cold run per wheel set into its
# own cache folders, then ROUNDS (default 3; 0: the cold runs only) alternating warm runs; prints
# the first-call, Dynamo, AOTAutograd, autotune and coil-stage lines of each
warm_ab() {
  local case round site s d
  old_wheels || echo "no .whl_old"
  for case in "$@"; do
    for round in cold $(seq ${ROUNDS:-3}); do
      for site in /tmp/site_old /tmp/site; do
        s=$(basename $site); d=/tmp/wab-$case-$s
        [ $round = cold ] && rm -rf $d
        echo "== $case $s $round"
        PYTHONPATH=$site COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor \
          timeout ${WARM_S:-120} python3 bench/compile_profile.py --case $case 2>&1 \
          | grep "first call\|Dynamo capture\|AOTAutograd\|autotune\|runtime compile\|coil stages" | cut -c1-120
      done
    done
  done
}

# `probe_ab TAG SCRIPT [ARG...]`: python3 SCRIPT ARG... with the old wheels (old_wheels, called
# here) and this tree's, one after the other, each with its own cache folder (/tmp/cc-TAG-<site>)
# and at most PROBE_S seconds (default 120); warnings dropped, output also in $OUT/TAG.txt
probe_ab() {
  local tag=$1 site
  shift
  old_wheels || echo "no .whl_old"
  for site in /tmp/site_old /tmp/site; do
    echo "== $(basename $site)"
    PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-$tag-$(basename $site) timeout ${PROBE_S:-120} \
      python3 "$@" 2>&1 | grep -v -i warn
  done 2>&1 | tee $OUT/$tag.txt
}

# `knob_ab VAR CASE...`: coil's step time and warm peak of each CASE (bench/train_step_time.py)
# with the environment variable VAR at 0 and at 1, alternating, ROUNDS rounds (default 2), this
# tree's wheels, one cache folder per case (a run-time knob: both settings share compiled code);
# prints one line a run
knob_ab() {
  local var=$1 case round v
  shift
  for case in "$@"; do
    for round in $(seq ${ROUNDS:-2}); do
      for v in 0 1; do
        env $var=$v COIL_CACHE_DIR=/tmp/coil-cache-$case timeout ${TIME_S:-150} \
          python3 bench/train_step_time.py $case "$var=$v" 2>&1 | tail -1
      done
    done
  done
}
