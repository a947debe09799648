"""Check compose files without starting anything, and print them as podman-compose reads them.

    .venv/bin/python deploy/compose_config.py                          # docker-compose.yml
    .venv/bin/python deploy/compose_config.py -f docker-compose.yml -f docker-compose.slurm.yml

podman-compose 1.0.3 has no ``config`` command, and ``--dry-run up`` still creates the
project's volumes and network.  This reads the files as podman-compose 1.0.3 does (the
variables of the environment and of an ``.env`` file beside the first file, the ``.env``
file's winning; ``${NAME:-default}``, ``${NAME:?message}``, ``$$``; each later file merged
into the first: mappings key by key, lists appended, other values replaced) and runs
nothing.  It prints the merged file (as ``docker compose config`` does) and exits 0, or
names each problem (its file, the service, what is wrong) on standard error and exits 1:

* a file that is not YAML, or has no ``services``;
* ``${NAME:?message}`` with NAME unset or empty;
* ``${NAME:-}`` (an empty default): podman-compose 1.0.3 leaves it as it is written;
* a service with neither ``image`` nor ``build``, a ``depends_on`` naming no service;
* an ``env_file`` that does not exist (the secrets of README "Compose" not written yet);
* a named volume not declared under the top-level ``volumes``.

A variable used without a default and not set is a warning (podman-compose makes it
empty).  Only PyYAML is needed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

# podman-compose 1.0.3's own pattern: a default or a message needs one character at least.
VARIABLE = re.compile(r"""
    \$(?:
        (?P<escaped>\$) |
        (?P<named>[_a-zA-Z][_a-zA-Z0-9]*) |
        (?:{
            (?P<braced>[_a-zA-Z][_a-zA-Z0-9]*)
            (?:
                (?::?-(?P<default>[^}]+)) |
                (?::?\?(?P<err>[^}]+))
            )?
        })
    )
""", re.VERBOSE)
# ${NAME:-} for compose, not $${NAME:-} (the shell's, after compose's $$ -> $).
EMPTY_DEFAULT = re.compile(r"(?:^|[^$])(?:\$\$)*\$\{([_a-zA-Z][_a-zA-Z0-9]*):?-\}")
LISTS = ("env_file", "security_opt", "volumes")  # a string there is a list of one


class Reading:
    def __init__(self, environ: dict[str, str]) -> None:
        self.environ = environ
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def substitute(self, value: Any, where: str) -> Any:
        if isinstance(value, dict):
            return {k: self.substitute(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v, where) for v in value]
        if not isinstance(value, str):
            return value
        for name in EMPTY_DEFAULT.findall(value):
            self.errors.append(f"{where}: ${{{name}:-}}: podman-compose 1.0.3 reads no empty "
                               "default and leaves it as written; leave the key without a "
                               f"value (NAME:) to pass {name} through from the environment")

        def one(match: re.Match[str]) -> str:
            if match.group("escaped") is not None:
                return "$"
            name = match.group("named") or match.group("braced")
            if self.environ.get(name) is not None:
                return self.environ[name]
            if match.group("err") is not None:
                self.errors.append(f"{where}: {name} is not set: {match.group('err')}")
                return ""
            if match.group("default") is None:
                self.warnings.append(f"{where}: {name} is not set: it becomes empty")
            return match.group("default") or ""

        return VARIABLE.sub(one, value)


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    for service in (data.get("services") or {}).values():
        for key in LISTS:
            if isinstance(service, dict) and isinstance(service.get(key), str):
                service[key] = [service[key]]
    return data


def merge(target: dict[str, Any], source: dict[str, Any], where: str,
          errors: list[str]) -> None:
    """podman-compose 1.0.3's merge: mappings key by key, lists appended (a volume's
    mount point replaced), anything else replaced; two types for one key is an error."""
    for key, value in source.items():
        if key not in target:
            target[key] = value
        elif type(value) is not type(target[key]):
            errors.append(f"{where}.{key}: a {type(value).__name__} here, a "
                          f"{type(target[key]).__name__} before: they cannot be merged")
        elif isinstance(value, dict):
            merge(target[key], value, f"{where}.{key}", errors)
        elif isinstance(value, list):
            if key == "volumes":
                points = {str(v).split(":", 2)[1] for v in value if ":" in str(v)}
                target[key] = [v for v in target[key]
                               if ":" not in str(v) or str(v).split(":", 2)[1] not in points]
            target[key] = target[key] + value
        else:
            target[key] = value


def check(merged: dict[str, Any], project: Path, errors: list[str]) -> None:
    services = merged.get("services") or {}
    declared = set(merged.get("volumes") or {})
    for name, service in services.items():
        where = f"services.{name}"
        if not isinstance(service, dict):
            errors.append(f"{where}: not a mapping")
            continue
        if "image" not in service and "build" not in service:
            errors.append(f"{where}: neither image nor build")
        needs = service.get("depends_on") or []
        for other in needs if isinstance(needs, list) else list(needs):
            if other not in services:
                errors.append(f"{where}.depends_on: {other} is no service of these files")
        for env_file in service.get("env_file") or []:
            if not (project / env_file).is_file():
                errors.append(f"{where}.env_file: {env_file} does not exist (README "
                              "\"Compose\" writes the secrets' files)")
        for volume in service.get("volumes") or []:
            source = str(volume).split(":", 1)[0]
            if ":" in str(volume) and not source.startswith(("/", ".", "~", "$")) \
                    and source not in declared:
                errors.append(f"{where}.volumes: {source} is not declared under volumes")


def dotenv(path: Path) -> dict[str, str]:
    """``NAME=value`` lines, as podman-compose reads an ``.env`` file (quotes removed)."""
    values: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            name, equals, value = line.strip().partition("=")
            if equals and name and not name.startswith("#"):
                values[name.strip()] = value.strip().strip("'\"")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--file", action="append", dest="files",
                        help="a compose file; repeat to merge (docker-compose.yml by default)")
    args = parser.parse_args(argv)
    files = [Path(f) for f in args.files or ["docker-compose.yml"]]
    project = files[0].resolve().parent
    reading = Reading({**os.environ, **dotenv(project / ".env")})
    merged: dict[str, Any] = {}
    for path in files:
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as error:
            reading.errors.append(f"{path}: {error}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
            reading.errors.append(f"{path}: no services (a mapping of them) at the top")
            continue
        data = {k: v for k, v in normalized(data).items() if not k.startswith("x-")}
        merge(merged, reading.substitute(data, str(path)), str(path), reading.errors)
    if not reading.errors:
        check(merged, project, reading.errors)
    for line in reading.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in reading.errors:
        print(f"error: {line}", file=sys.stderr)
    if reading.errors:
        return 1
    print(yaml.safe_dump(merged, sort_keys=False, allow_unicode=True), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
