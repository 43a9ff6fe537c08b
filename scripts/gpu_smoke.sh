#!/usr/bin/env bash
# GPU smoke test for moderator training: the tiny pipeline through `metamod train` on CUDA.
#   make gpu-smoke            (or: bash scripts/gpu_smoke.sh)
# Exercises, each for a few GRPO steps on the offline tiny model and a hand-built moderator dataset:
#   1. bf16 + LoRA + gradient checkpointing on CUDA (plain `python -m metamod.cli train`);
#   2. the same through `accelerate launch --config_file configs/accelerate/single_gpu.yaml`;
#   3. vLLM generation (use_vllm, colocate mode) when vllm is installed.
# Prints what ran and what was skipped; exits 0 with SKIP when there is no CUDA device, non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 WANDB_MODE=offline

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "SKIP gpu-smoke: no CUDA device visible to torch (nothing exercised)."
  exit 0
fi
"$PY" -c "import torch; print('CUDA device:', torch.cuda.get_device_name(0), '| bf16:', torch.cuda.is_bf16_supported())"

WORK="${GPU_SMOKE_DIR:-$(mktemp -d /tmp/metamod-gpu-smoke.XXXXXX)}"
echo "work dir: $WORK"
# head_dim 32 (hidden 64 / 2 heads): vLLM's attention kernels reject the default tiny head_dim of 16.
"$PY" - "$WORK" <<'PYEOF'
import sys
from pathlib import Path
from metamod.llm.tiny import ensure_tiny_model
sys.path.insert(0, ".")
from tests._train_data import save_dataset
work = Path(sys.argv[1])
ensure_tiny_model(work / "tiny", num_heads=2, num_kv_heads=1)
save_dataset(work / "data", n_train=64, n_val=16)
PYEOF

COMMON=(--model_name_or_path "$WORK/tiny" --dataset_path "$WORK/data" --per_device_train_batch_size 8
        --num_generations 4 --max_completion_length 8 --learning_rate 5e-3 --beta 0 --lora_r 8
        --logging_steps 1 --save_strategy no --report_to none --max_steps 3
        --use_cpu false --bf16 true --gradient_checkpointing true)
declare -a DONE SKIPPED

check_summary() {  # $1 = run dir, $2 = label
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
s = json.load(open(f"{sys.argv[1]}/train_summary.json"))
assert s["global_step"] == 3, s
print(f"OK {sys.argv[2]}: {s['global_step']} steps, {s['wall_time_s']}s, reward {s['first_logged']} -> {s['last_logged']}")
PYEOF
}

"$PY" -m metamod.cli train "${COMMON[@]}" --output_dir "$WORK/run_bf16"
check_summary "$WORK/run_bf16" "bf16 + LoRA + gradient checkpointing on CUDA"
DONE+=("bf16 + LoRA + gradient checkpointing on CUDA (metamod train)")

ACC="$(dirname "$PY")/accelerate"
[ -x "$ACC" ] || ACC="$(command -v accelerate || true)"
if [ -n "$ACC" ]; then
  "$ACC" launch --config_file configs/accelerate/single_gpu.yaml -m metamod.cli train "${COMMON[@]}" \
    --output_dir "$WORK/run_accelerate"
  check_summary "$WORK/run_accelerate" "accelerate launch (single_gpu.yaml)"
  DONE+=("accelerate launch --config_file configs/accelerate/single_gpu.yaml")
else
  SKIPPED+=("accelerate launch: the accelerate CLI is not installed")
fi

if "$PY" -c "import vllm" 2>/dev/null; then
  "$PY" -m metamod.cli train "${COMMON[@]}" --output_dir "$WORK/run_vllm" \
    --use_vllm true --vllm_mode colocate --vllm_gpu_memory_utilization 0.2 --vllm_max_model_length 2048
  check_summary "$WORK/run_vllm" "vLLM colocate generation"
  DONE+=("vLLM colocate generation (use_vllm=true)")
else
  SKIPPED+=("vLLM generation: vllm is not installed (pip install -e '.[vllm]')")
fi

echo
echo "gpu-smoke exercised:"; for x in "${DONE[@]}"; do echo "  - $x"; done
if [ "${#SKIPPED[@]}" -gt 0 ]; then echo "gpu-smoke skipped:"; for x in "${SKIPPED[@]}"; do echo "  - SKIP $x"; done; fi
