# What the README's command-line block takes as the reader's own, made in the reader's
# directory and on the stack before it runs: a task file (task.yaml) with the script
# it names (train.py), a .env beside it, a task that runs until stopped (long.yaml), and a project "vision" of alice's that the
# admin looks after (an admin needs no membership: their own tasks stay in the one
# project they are a member of, `make example`'s).
# (cli.stdin is what the reader types when `taskenv env set --secret` asks.)
cat > task.yaml <<'YAML'
name: cli-demo
steps:
  - [python3, train.py]
files:
  - {path: train.py, source: train.py}
env:
  - {name: LEARNING_RATE, value: "0.01"}
YAML
cat > train.py <<'PY'
import os

print("train sees LEARNING_RATE", os.environ["LEARNING_RATE"], "EPOCHS", os.environ["EPOCHS"])
print("and reads", os.environ.get("BATCH_SIZE", "no BATCH_SIZE"))
PY
printf 'EPOCHS=3\n' > .env
cat > long.yaml <<'YAML'
name: long
steps:
  - [sleep, "600"]
YAML
curl -sf -X POST "$API/projects" -H "$ADMIN" -H 'Content-Type: application/json' \
  -d '{"name": "vision", "members": ["alice"]}' >/dev/null
