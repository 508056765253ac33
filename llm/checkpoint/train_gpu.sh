#!/usr/bin/env bash
# Continue the shipped checkpoint on one CUDA GPU: three runs side by side (a model this
# small leaves the GPU mostly idle, so they share it), each a cosine schedule over
# MINUTES of wall time, then each scored on the dev splits (Disfl-QA dev cleanup at
# effort low; SGD dev replies, 200 items, every effort). Run from the repository root:
#     MINUTES=5 RESULTS=runs/gpu llm/checkpoint/train_gpu.sh
# INIT=folder starts from another checkpoint; ONLY=C runs one variant; DEVICE=cpu and a small
# BATCH try the script on a machine without a GPU.
# Checkpoints go to runs/gpu-<name>/; logs, scores and a float16 copy of each model
# (to carry it off the machine) go to RESULTS; with PACK=folder, one tar per run goes there too.
set -uo pipefail
MINUTES=${MINUTES:-5}
RESULTS=${RESULTS:-runs/gpu}
BATCH=${BATCH:-512}
DEVICE=${DEVICE:-cuda}
ONLY=${ONLY:-}  # a variant name: run that one alone
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

variant() {
    local name=$1; shift
    local ckpt=runs/gpu-$name
    [[ -n $ONLY && $ONLY != "$name" ]] && return 0
    python3 -m llm train --device "$DEVICE" --init-from "${INIT:-llm/checkpoint}" --out "$ckpt" --steps 0 --minutes "$MINUTES" \
        --batch-size "$BATCH" --warmup-steps 200 --eval-every 2000 "$@" >"$RESULTS/$name.train.log" 2>&1 || {
        echo "variant $name: training failed"; tail -5 "$RESULTS/$name.train.log"; return 1; }
    python3 -m llm eval cleanup --efforts low --llm-model "$ckpt" --device "$DEVICE" \
        --json-out "$RESULTS/$name.cleanup.json" >"$RESULTS/$name.eval.log" 2>&1
    python3 -m llm eval reply --limit 200 --llm-model "$ckpt" --device "$DEVICE" \
        --json-out "$RESULTS/$name.reply.json" >>"$RESULTS/$name.eval.log" 2>&1
    python3 - "$ckpt" "$RESULTS/$name.fp16.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
weights = load_file(f"{sys.argv[1]}/model.safetensors")
save_file({k: v.half().contiguous() for k, v in weights.items()}, sys.argv[2], metadata={"format": "pt"})
PY
    cp "$ckpt/quicksilver.json" "$RESULTS/$name.quicksilver.json"
    echo "== $name"; cat "$RESULTS/$name.eval.log"
    [[ -n ${PACK:-} ]] && tar cf "$PACK/$name.tar" -C "$RESULTS" "$name.train.log" "$name.eval.log" \
        "$name.cleanup.json" "$name.reply.json" "$name.quicksilver.json" "$name.fp16.safetensors"
    return 0
}

variant A --lr 5e-4 --reply-fraction 0.5 --disfl-weight 0.6 &
variant B --lr 5e-4 --reply-fraction 0.7 --disfl-weight 0.6 &
variant C --lr 1e-3 --reply-fraction 0.6 --disfl-weight 0.6 &
wait
