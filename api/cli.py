"""Operator commands: ``python -m api.cli create-token|rotate-secrets``."""

from __future__ import annotations

import argparse
import sys

from shared.access.tokens import ROLES
from shared.config import Settings
from shared.errors import NotFound
from workers.services import Services, build_services


def create_token(svc: Services, owner: str, role: str) -> int:
    token, ident = svc.tokens.create(owner, role, "cli")
    print(f"token {ident.id} for {owner} ({role}); it is shown only now:", file=sys.stderr)
    print(token)
    return 0


def rotate_secrets(svc: Services) -> int:
    """Re-seal every sealed value with the first configured key: each task's every
    revision and every policy version of every scope.  Afterwards the old keys can go."""
    tasks = revisions = 0
    for task_id in svc.tasks.all_ids():
        try:
            revisions += svc.tasks.reseal(task_id)
        except NotFound:
            continue  # expired meanwhile
        tasks += 1
    versions = svc.policies.reseal_all()
    print(f"re-sealed {tasks} tasks ({revisions} revisions) and {versions} policy versions",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    token = sub.add_parser("create-token", help="create an API token and print it once")
    token.add_argument("--owner", required=True)
    token.add_argument("--role", choices=ROLES, default="user")
    sub.add_parser("rotate-secrets", help="re-encrypt stored secrets with the first key")
    args = parser.parse_args(argv)
    svc = build_services(Settings.from_env())
    if args.command == "create-token":
        return create_token(svc, args.owner, args.role)
    return rotate_secrets(svc)


if __name__ == "__main__":
    sys.exit(main())
