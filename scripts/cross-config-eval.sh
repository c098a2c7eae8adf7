#!/usr/bin/env bash
# Cross-configuration evaluation: does the model learn GPU failures, or the simulated fleet?
#
#   1. simulate a training fleet that is mostly A100 (80 % A100, 20 % H100), seed 201
#   2. train a model on it (build/cross/a100-model.skops)
#   3. simulate an evaluation fleet that is mostly H100/H200 (60 % H100, 40 % H200), seed 202
#   4. evaluate the A100-trained model on the H100/H200 fleet -> build/cross/eval-a100-on-h100/
#   5. evaluate the shipped default model (trained on a mixed fleet) on the same fleet
#      -> build/cross/eval-default-on-h100/
#
# Both fleets: 64 nodes x 8 GPUs x 120 days, hourly. Training takes several minutes.
# Run from anywhere inside the repository:  bash scripts/cross-config-eval.sh
# Each step prints how long it took; every run redoes all steps and overwrites the outputs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
GH=.venv/bin/gpuhealth
DIR=build/cross
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" # shared machine: one thread per BLAS/OpenMP pool
mkdir -p "$DIR"

step() {
	local name=$1
	shift
	echo "== $name: $*"
	local t0=$SECONDS
	"$@"
	echo "== $name took $((SECONDS - t0)) s"
}

step "simulate training fleet (mostly A100)" \
	"$GH" simulate --nodes 64 --gpus-per-node 8 --days 120 --interval 1h --seed 201 \
	--models A100=0.8,H100=0.2 \
	--out "$DIR/fleet-a100-201.parquet" --failures "$DIR/failures-a100-201.csv"

step "train on the A100 fleet" \
	"$GH" train --history "$DIR/fleet-a100-201.parquet" --failures "$DIR/failures-a100-201.csv" \
	--out "$DIR/a100-model.skops"

step "simulate evaluation fleet (mostly H100/H200)" \
	"$GH" simulate --nodes 64 --gpus-per-node 8 --days 120 --interval 1h --seed 202 \
	--models H100=0.6,H200=0.4 \
	--out "$DIR/fleet-h100-202.parquet" --failures "$DIR/failures-h100-202.csv"

step "evaluate the A100 model on the H100/H200 fleet" \
	"$GH" evaluate --history "$DIR/fleet-h100-202.parquet" --failures "$DIR/failures-h100-202.csv" \
	--model "$DIR/a100-model.skops" --out "$DIR/eval-a100-on-h100"

step "evaluate the default model on the H100/H200 fleet" \
	"$GH" evaluate --history "$DIR/fleet-h100-202.parquet" --failures "$DIR/failures-h100-202.csv" \
	--out "$DIR/eval-default-on-h100"

echo
echo "reports: $DIR/eval-a100-on-h100/report.md, $DIR/eval-default-on-h100/report.md"
