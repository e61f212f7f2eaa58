#!/usr/bin/env bash
# The main job end to end on the embedded default model (README command 1):
# profile → merge → convert → run, from this repository alone.
#
#   tools/demo.sh [MODEL_DIR] [DATA_DIR] [OUT_DIR]
#
# Defaults: testdata/models/tinystories-656k, testdata/data, out/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-testdata/models/tinystories-656k}
data=${2:-testdata/data}
out=${3:-out/demo}
sinf=bin/sinf
run=bin/sinf-run
mkdir -p "$out"

echo "== profile: the task (TinyStories) and two more datasets for the model level"
$sinf profile --quiet --model "$model" --data-dir "$data" --dataset tinystories --limit 64 --max-new-tokens 16 --out "$out/tinystories.scores"
$sinf profile --quiet --model "$model" --data-dir "$data" --dataset wikitext2 --limit 3 --max-new-tokens 16 --out "$out/wikitext2.scores"
$sinf profile --quiet --model "$model" --data-dir "$data" --dataset xsum --limit 20 --max-new-tokens 16 --out "$out/xsum.scores"

echo "== merge: task level (one task) and model level (across tasks)"
$sinf merge --out "$out/task.scores" "$out/tinystories.scores"
$sinf merge --out "$out/model.scores" "$out/tinystories.scores" "$out/wikitext2.scores" "$out/xsum.scores"

echo "== convert: gamma 0.7, delta 0.3 over layers [0, 2) of the 2-layer model, reconstructed (the default: refitted rows and an output bias, calibrated on the TinyStories profile split)"
$sinf convert --quiet --model "$model" --task-scores "$out/task.scores" --model-scores "$out/model.scores" \
	--gamma 0.7 --delta 0.3 --first-layer 0 --last-layer 2 --data-dir "$data" --out "$out/tinystories-656k.sinf"
$sinf verify "$out/tinystories-656k.sinf"

echo "== run: sinf-run, gatefirst (the default: phi 0.25 reads what selectinfer reads at 0.4)"
prompt="Once upon a time, there was a little girl named Lily. She"
echo "prompt: $prompt"
printf 'continuation (the 656K-parameter model goes on from the last token): '
$run --model "$out/tinystories-656k.sinf" --prompt "$prompt" --max-tokens 80
