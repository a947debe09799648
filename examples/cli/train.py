"""What the task's step runs: it reads its settings from its environment, nothing else."""

import os

print("train sees LEARNING_RATE", os.environ["LEARNING_RATE"], "EPOCHS", os.environ["EPOCHS"])
print("and reads", os.environ.get("BATCH_SIZE", "no BATCH_SIZE"))
