#!/usr/bin/env bash
# The script a lent GPU machine runs first (the device tool: `bash device/run.sh 480`): install, prepare the mini
# corpora, train the evidence queue (`lnrepro queue --run`: calibration of undecided tasks first, each cell's seeds
# grouped) for the seconds given, then bring back under $OUT every record and log it wrote, the queue it worked
# from and its output. Stopped by the time limit, the runs checkpoint; their folders come back too (checkpoints
# only where small), so a later machine resumes them. The GPU machine reaches no package registry: carry the prepared
# corpora (`data/`, speech_mini included, which needs espeak-ng to make) with the working tree.
set -uo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-480}
OUT=${OUT:-out}
mkdir -p "$OUT"
SHARED=${LNREPRO_SHARED_DATA:-../shared/data}
make install > "$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
source .venv/bin/activate
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.csv" 2>&1 || true
# the mini corpora the queue trains on, from the shared small corpora where this copy has them, else as carried
for corpus in multi30k gigaword wikitext103 speech-mini; do
  case $corpus in
    speech-mini) src=$SHARED/librispeech ;;
    *) src=$SHARED/$corpus ;;
  esac
  [ -d "$src" ] && lnrepro prepare "$corpus" --source "$src" >> "$OUT/prepare.log" 2>&1
done
lnrepro queue --format json > "$OUT/queue.json"
if [ "$LIMIT" -gt 0 ]; then
  timeout --signal=TERM --kill-after=60 "$LIMIT" lnrepro queue --run --runs runs/queue > "$OUT/queue-run.out" 2>&1
  echo "queue --run exit $?" >> "$OUT/queue-run.out"
fi
# results/ whole (a few MB): what the run added is what differs from the checkout it came from
cp -r results "$OUT/results"
# the run folders' logs and status (checkpoints stay: a later machine starts from the records' seeds anew)
if [ -d runs/queue ]; then
  find runs/queue -name 'log.jsonl' -o -name 'status.json' -o -name '*.out' | while read -r f; do
    mkdir -p "$OUT/$(dirname "$f")" && cp "$f" "$OUT/$f"
  done
fi
tail -5 "$OUT/queue-run.out" 2>/dev/null || true
