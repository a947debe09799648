"""Operator commands: ``python -m api.cli create-token|rotate-secrets``."""

from __future__ import annotations

import argparse
import sys

from shared.config import Settings
from shared.redis_conn import connect
from shared.secrets import Cipher
from shared.store import TaskStore
from shared.tokens import ROLES, TokenStore


def create_token(settings: Settings, owner: str, role: str) -> int:
    client = connect(settings.redis_url, settings.redis_master_name)
    token, ident = TokenStore(client, settings.key_prefix).create(owner, role, "cli")
    print(f"token {ident.id} for {owner} ({role}); it is shown only now:", file=sys.stderr)
    print(token)
    return 0


def rotate_secrets(settings: Settings) -> int:
    """Re-seal every task with the first configured key (load and store each record)."""
    client = connect(settings.redis_url, settings.redis_master_name)
    store = TaskStore(client, settings.key_prefix, Cipher.from_setting(settings.secret_keys))
    count = 0
    ids: list[str] = client.zrange(store.keys.index(), 0, -1)  # type: ignore[assignment]
    for task_id in ids:
        store.update(task_id, lambda doc: doc)
        count += 1
    print(f"re-sealed {count} tasks", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    token = sub.add_parser("create-token", help="create an API token and print it once")
    token.add_argument("--owner", required=True)
    token.add_argument("--role", choices=ROLES, default="user")
    sub.add_parser("rotate-secrets", help="re-encrypt stored secrets with the first key")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.command == "create-token":
        return create_token(settings, args.owner, args.role)
    return rotate_secrets(settings)


if __name__ == "__main__":
    sys.exit(main())
