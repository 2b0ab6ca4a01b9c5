#!/usr/bin/env bash
# The script a lent GPU machine runs first: `bash device/run.sh SECONDS` (device/README.md). It installs, prepares
# the mini corpora, trains the evidence queue (`lnrepro queue --run`: calibration of undecided tasks first, each
# cell's seeds grouped) for the seconds given, then writes under $OUT the queue it worked from, its output, results/
# as the run left it, and an archive of the runs it did not finish (checkpoints, log, recipe), so a later machine
# resumes and evaluates them. The GPU machine reaches no package registry: carry the prepared corpora (`data/`,
# speech_mini included, which needs espeak-ng to make) with the working tree.
#   LNREPRO_SCALE (mini), LNREPRO_SETS (the first N decisive sets; all), LNREPRO_RESULTS_DIR (results),
#   LNREPRO_RUNS (runs/queue: where the runs train), LNREPRO_DATA (data: the prepared corpora)
set -uo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-480}
OUT=${OUT:-out}
SCALE=${LNREPRO_SCALE:-mini}
RESULTS=${LNREPRO_RESULTS_DIR:-results}
SETS=${LNREPRO_SETS:+--limit $LNREPRO_SETS}
RUNS=${LNREPRO_RUNS:-runs/queue}
SHARED=${LNREPRO_SHARED_DATA:-../shared/data}
mkdir -p "$OUT" "$RESULTS"
make install > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
source .venv/bin/activate
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.csv" 2>&1 || true
if [ "$SCALE" = mini ]; then  # the mini corpora, from the shared small corpora where this copy has them
  for corpus in multi30k gigaword wikitext103 speech-mini; do
    case $corpus in
      speech-mini) src=$SHARED/librispeech ;;
      *) src=$SHARED/$corpus ;;
    esac
    [ -d "$src" ] && lnrepro prepare "$corpus" --source "$src" >> "$OUT/prepare.log" 2>&1
  done
fi
lnrepro queue --scale "$SCALE" --results "$RESULTS" $SETS --format json > "$OUT/queue.json"
if [ "$LIMIT" -gt 0 ]; then
  timeout --signal=TERM --kill-after=60 "$LIMIT" lnrepro queue --scale "$SCALE" --results "$RESULTS" $SETS --run \
    --runs "$RUNS" > "$OUT/queue-run.out" 2>&1
  echo "queue --run exit $?" >> "$OUT/queue-run.out"
fi
cp -r "$RESULTS" "$OUT/results"  # what the run added is what differs from the checkout it came from
# the runs not yet evaluated (no metrics.json): to resume, the newest checkpoint of either kind; trained but cut
# before their evaluation, the checkpoints it averages and the status
if [ -d "$RUNS" ]; then
  list=$(mktemp)
  for run in "$RUNS"/*/ "$RUNS"/calibration/v2/*/*/; do
    [ -d "$run" ] && [ -f "$run/log.jsonl" ] && [ ! -f "$run/metrics.json" ] || continue
    if [ -f "$run/status.json" ]; then
      keep=$(ls "$run" | grep -E '^checkpoint_[0-9]+\.pt(\.sha256)?$')
      keep="$keep status.json"
    else
      newest=$(ls "$run" | grep -E '^(checkpoint|resume)_[0-9]+\.pt$' | sort -t_ -k2 -n | tail -1)
      keep=${newest:+$newest $newest.sha256}
    fi
    for f in log.jsonl recipe.yaml $keep; do
      [ -f "$run/$f" ] && echo "${run%/}/$f" >> "$list"
    done
  done
  [ -s "$list" ] && tar czf "$OUT/unfinished-runs.tar.gz" -T "$list" 2>/dev/null
fi
tail -5 "$OUT/queue-run.out" 2>/dev/null || true
