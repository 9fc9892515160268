#!/usr/bin/env bash
# One GPU lease: install pandapower (gridsim builds IEEE 33 from it) from carried wheels, check the
# imports, train transformer-dva-fast on the v4 prior for MINUTES (default 7.5) of wall time, warm
# from the served 0.2.2, and leave the run's state (safetensors + JSON) and the log in $OUT.
#   run(command="bash bench/train_on_device.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L
python3 -c "import torch, pandapower, safetensors, tqdm, scipy, numpy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'pandapower', pandapower.__version__)" || exit 1
timeout -s TERM "${TRAIN_TIMEOUT:-570}" python3 bench/train_on_device.py train \
  --config models/configs/ieee33-transformer-dva-fast-v4-gpu.json --run-dir /tmp/run --out "$OUT" \
  --minutes "${MINUTES:-7.5}" --init-weights models/registry/transformer-dva-fast/0.2.2/model.safetensors \
  2>&1 | tee "$OUT/train.log"
ls -la "$OUT"
