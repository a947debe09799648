#!/bin/sh
# Step 1: make a small data set.  Everything it needs comes from the task's env:
# no export lines, no setenv, nothing hard-coded.
set -eu

echo "prepare: task $TASK_NAME ($TASK_ID), env revision $TASK_ENV_REVISION, policy v$TASK_POLICY_VERSION"
echo "prepare: variables in my environment: $(env | cut -d= -f1 | grep -E '^[A-Za-z_][A-Za-z0-9_]*$' | sort | tr '\n' ' ')"

mkdir -p "$DATA_DIR"
# y = 3x + 2 plus a little noise; awk's generator is seeded from the env, so runs repeat.
awk -v n="$NUM_SAMPLES" -v seed="$SEED" 'BEGIN {
    srand(seed)
    for (i = 0; i < n; i++) {
        x = rand() * 2 - 1
        printf "%.6f,%.6f\n", x, 3 * x + 2 + (rand() - 0.5) * 0.1
    }
}' > "$DATA_DIR/train.csv"
echo "prepare: wrote $NUM_SAMPLES samples to $DATA_DIR/train.csv"
