#!/usr/bin/env bash
# Installs PyTorch (CPU wheels, from PyPI) into a virtual environment outside
# the repository, for the tests and benchmarks that use PyTorch as an
# independent reference (REQUIRES: torch) or as a peer to measure against,
# and beside it the Hugging Face packages the interchange tests judge by
# (REQUIRES: transformers): transformers, safetensors, tokenizers,
# sentencepiece, and megatron-core (whose IndexedDatasetBuilder writes the
# Megatron-LM datasets the data tests read).
# PipeForge itself never needs it. Idempotent.
#   PIPEFORGE_TORCH_VENV (default: ~/.cache/pipeforge/torch-venv)
# Prints the interpreter to use; test/lit.cfg.py finds it there.
set -euo pipefail
VENV=${PIPEFORGE_TORCH_VENV:-$HOME/.cache/pipeforge/torch-venv}
PY="$VENV/bin/python"
EXTRAS=(transformers safetensors tokenizers sentencepiece megatron-core)
if [ -x "$PY" ] && "$PY" -c "import torch, numpy, transformers, safetensors, tokenizers, sentencepiece, megatron.core" >/dev/null 2>&1; then
  echo "setup-torch: $("$PY" -c 'import torch; print("torch", torch.__version__)') in $VENV"
  exit 0
fi
log=/tmp/pipeforge-setup-torch.log
python3 -m venv "$VENV" >"$log" 2>&1 || {
  echo "setup-torch: error: could not create a venv at $VENV (see $log)" >&2; exit 1; }
# The CPU wheels are a fifth of the default's size, where their index is
# reachable (one quick try); else PyPI's default wheel.
if ! "$PY" -m pip install -q --retries 0 --timeout 15 --no-cache-dir \
     --index-url https://download.pytorch.org/whl/cpu torch >>"$log" 2>&1; then
  "$PY" -m pip install -q --no-cache-dir torch >>"$log" 2>&1 || {
    echo "setup-torch: error: pip could not install torch (see $log)" >&2; exit 1; }
fi
"$PY" -m pip install -q numpy >>"$log" 2>&1 || true
# The Hugging Face side (without them only the REQUIRES: transformers tests
# are skipped; torch's own tests still run).
"$PY" -m pip install -q "${EXTRAS[@]}" >>"$log" 2>&1 ||
  echo "setup-torch: warning: could not install ${EXTRAS[*]} (see $log)" >&2
echo "setup-torch: $("$PY" -c 'import torch; print("torch", torch.__version__)') in $VENV"
