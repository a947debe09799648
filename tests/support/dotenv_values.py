"""Values a `.env` file must carry back exactly: quotes, escapes, shell syntax, line
ends, comment marks, padding, tabs, non-ASCII and nothing at all.

Shared by the server's `.env` round trip (tests/api) and the CLI's (tests/cli), so
both are held to the same list.
"""

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
