"""Step 2: train a linear model on the data set step 1 wrote.

Hyper-parameters and paths come only from the environment the platform
injected; the script never sets a variable itself.
"""

import os
import random


def load(path):
    with open(path) as f:
        return [tuple(map(float, line.split(","))) for line in f if line.strip()]


def train(samples, learning_rate, epochs, seed):
    random.seed(seed)
    w = b = 0.0
    for _ in range(epochs):
        random.shuffle(samples)
        for x, y in samples:
            error = w * x + b - y
            w -= learning_rate * error * x
            b -= learning_rate * error
    loss = sum((w * x + b - y) ** 2 for x, y in samples) / len(samples)
    return w, b, loss


def main():
    env = os.environ
    names = sorted(n for n in env if n != "LC_CTYPE")  # LC_CTYPE: set by Python itself
    print(f"train: variables in my environment: {' '.join(names)}")
    print(f"train: NCCL_DEBUG={env['NCCL_DEBUG']} NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']}")
    print(f"train: RUN_NOTE={env['RUN_NOTE']!r}")
    samples = load(os.path.join(env["DATA_DIR"], "train.csv"))
    w, b, loss = train(samples, float(env["LEARNING_RATE"]), int(env["EPOCHS"]),
                       int(env["SEED"]))
    print(f"train: w={w:.3f} b={b:.3f} mse={loss:.5f} (true w=3, b=2)")
    os.makedirs(env["OUTPUT_DIR"], exist_ok=True)
    with open(os.path.join(env["OUTPUT_DIR"], "model.txt"), "w") as f:
        f.write(f"{w} {b}\n")


if __name__ == "__main__":
    main()
