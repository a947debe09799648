"""How many files a task may carry and how many bytes they may hold, and how a file's
size is counted: a leaf both the task's files (``shared.task.files``) and the doctor,
which stops reading at the same limits (``shared.doctor``), stand on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.config import DEFAULTS


@dataclass(frozen=True)
class FileLimits:
    max_files: int = DEFAULTS.max_files
    max_bytes: int = DEFAULTS.max_files_bytes

    @classmethod
    def from_settings(cls, settings: Any) -> FileLimits:
        return cls(max_files=settings.max_files, max_bytes=settings.max_files_bytes)


def size(content: str) -> int:
    """A file's size as it is stored and written: its UTF-8 bytes."""
    return len(content.encode("utf-8", "surrogatepass"))
