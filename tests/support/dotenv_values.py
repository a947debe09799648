"""Values a `.env` file must carry back exactly: quotes, escapes, shell syntax, line
ends, comment marks, padding, tabs, non-ASCII and nothing at all.

Shared by the server's `.env` round trip (tests/api) and the CLI's (tests/cli), so
both are held to the same list.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HOSTILE_VALUES = {
    "DOUBLE_QUOTES": 'say "hi"',
    "SINGLE_QUOTES": "it's 'quoted'",
    "BACKSLASHES": "C:\\path\\n not a newline \\\\",
    "DOLLAR": "$HOME ${HOME} $(id) `id`",
    "EQUALS": "a=b==c",
    "NEWLINES": "line one\nline two\n",
    "CARRIAGE": "dos\r\nline\r",
    "HASH": "# not a comment # really",
    "PADDED": "  padded  ",
    "NON_ASCII": "数据集/训练 — ünïcode ✓",
    "EMPTY": "",
    "TAB": "a\tb",
}

# Those no quoting lets both python-dotenv and a shell read exactly: the export names them
# in a comment instead of writing them.
LEFT_OUT = {"SINGLE_QUOTES", "BACKSLASHES", "CARRIAGE"}
EXPORTED_VALUES = {k: v for k, v in HOSTILE_VALUES.items() if k not in LEFT_OUT}
# A value a shell that sources the file would run, if it ran anything.
RUNS_IF_SOURCED = "$(touch {marker}) `touch {marker}` ${{X:=$(touch {marker})}}"


def sourced(text: str, tmp: Path) -> dict[str, str]:
    """What bash makes of the text when it sources it (``set -a; . file``): the variables
    it sets, from a clean environment."""
    path = tmp / "sourced.env"
    path.write_text(text, encoding="utf-8")
    out = subprocess.run(["bash", "-c", 'set -a; . "$1"; env -0', "_", str(path)],
                         env={}, capture_output=True, check=True).stdout.decode()
    pairs = (item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {k: v for k, v in pairs if k not in {"PWD", "SHLVL", "_", "OLDPWD"}}
