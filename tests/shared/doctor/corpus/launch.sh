#!/usr/bin/env bash
# The wrapper every step runs.  $NCCL_DEBUG in this comment reads nothing.
set -euo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
NPROC=${NPROC_PER_NODE-1}
echo 'a literal $NOT_A_READ'
log() { echo "[$(date)] $*" >> "${LOG_DIR}/train.log"; }
torchrun --nnodes "$PET_NNODES" --nproc_per_node "$NPROC" argparse_env.py --epochs "${EPOCHS}"
log "done on $HOSTNAME"
