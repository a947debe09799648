"""A torchrun entry point: the rank variables come from torchrun, the rest from the task."""
import os

local_rank = int(os.environ["LOCAL_RANK"])
world_size = int(os.environ["WORLD_SIZE"])
rank = int(os.environ["RANK"])
batch_size = int(os.environ["BATCH_SIZE"])
if "RESUME_FROM" in os.environ:
    print("resuming from", os.environ["RESUME_FROM"])
os.environ["TOKENIZERS_PARALLELISM"] = "false"
print(local_rank, world_size, rank, batch_size, os.environ["TOKENIZERS_PARALLELISM"])
