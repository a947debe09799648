"""Operator commands: ``python -m api.cli create-token|rotate-secrets``.

They reach Redis directly, with the settings every taskenv process reads
(:func:`shared.config.read_settings`): ``TASKENV_*`` variables first, then what ``make
run`` wrote under ``var/`` in the current directory (``var/redis.url`` while it runs,
``var/secret.key``).  Without either, they say what to set instead of failing with a
traceback.
"""

from __future__ import annotations

import argparse
import sys

import redis

from shared.access.tokens import ROLES
from shared.config import REDIS_URL_FILE, VAR, process_settings
from shared.config import shown_url as shown
from shared.errors import NotFound
from shared.keyring import sealed_with_only
from shared.secrets import key_fingerprints
from workers.services import Services, build_services

NO_REDIS = ("set TASKENV_REDIS_URL to the platform's Redis, or run this in the directory "
            f"where `make run` runs (it writes {VAR / REDIS_URL_FILE} while it runs)")


class OperatorError(Exception):
    """What the operator must set or start; printed as it is, never as a traceback."""


def create_token(svc: Services, owner: str, role: str) -> int:
    token, ident = svc.tokens.create(owner, role, "cli")
    print(f"token {ident.id} for {owner} ({role}); it is shown only now:", file=sys.stderr)
    print(token)
    return 0


def rotate_secrets(svc: Services) -> int:
    """Re-seal every sealed value with the first configured key: each task's every
    revision and every policy version of every scope.  Afterwards the old keys can go."""
    if not svc.settings.secret_keys.strip():
        raise OperatorError("no secret keys to re-seal with: set TASKENV_SECRET_KEYS (the new "
                            f"key first, then the old ones), or keep them in {VAR}/secret.key "
                            "as `make run` does")
    tasks = revisions = 0
    for task_id in svc.tasks.all_ids():
        try:
            revisions += svc.tasks.reseal(task_id)
        except NotFound:
            continue  # expired meanwhile
        tasks += 1
    versions = svc.policies.reseal_all()
    # Every value is sealed with the first key now: the platform's record of its keys
    # holds it alone, and processes without the old keys may start (shared.keyring).
    sealed_with_only(svc.redis, svc.keys, key_fingerprints(svc.settings.secret_keys)[0])
    print(f"re-sealed {tasks} tasks ({revisions} revisions) and {versions} policy versions",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.cli", description=__doc__.split(
        "\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    token = sub.add_parser("create-token", help="create an API token and print it once")
    token.add_argument("--owner", required=True)
    token.add_argument("--role", choices=ROLES, default="user")
    sub.add_parser("rotate-secrets", help="re-encrypt stored secrets with the first key")
    args = parser.parse_args(argv)
    settings = process_settings()
    try:
        svc = build_services(settings)
        svc.redis.ping()
        if args.command == "create-token":
            return create_token(svc, args.owner, args.role)
        return rotate_secrets(svc)
    except OperatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except redis.AuthenticationError:
        print(f"error: Redis at {shown(settings.redis_url)} refused the password: "
              f"{NO_REDIS}", file=sys.stderr)
    except redis.RedisError as exc:
        print(f"error: cannot reach Redis at {shown(settings.redis_url)} ({exc}): {NO_REDIS}",
              file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
