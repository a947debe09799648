"""Hugging Face style: the model and paths from the environment, a token from a secret."""
import os
from os import environ as env

MODEL = env.get("MODEL_NAME", "gpt2")
token = os.environ["HF_TOKEN"]
output_dir = os.environ["OUTPUT_DIR"]
cache = os.getenv("HF_HOME")
stage = os.environ.get("STAGE", "pretrain")
lr = float(os.environ["LR_" + stage.upper()])  # the name is only known at run time


def push_to_hub() -> str:  # never called below: its read still counts
    return os.environ["HUB_REPO"]


print(MODEL, token[:0], output_dir, cache, lr)
