"""A plain training script: argparse flags whose defaults come from the environment."""
import argparse
import os


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=float(os.environ.get("LR", "3e-4")))
    parser.add_argument("--epochs", type=int, default=int(os.getenv("EPOCHS", 10)))
    parser.add_argument("--data", default=os.environ["DATA_DIR"])
    return parser.parse_args()


if __name__ == "__main__":
    args = parse()
    run_name = os.environ.get("WANDB_RUN_NAME")
    print(args, run_name)
