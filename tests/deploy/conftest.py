"""The replay of the Kubernetes docs (tests/deploy/doc_blocks.py), shared by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy import doc_blocks

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def doc_walk(tmp_path_factory: pytest.TempPathFactory) -> doc_blocks.Walk:
    """deploy/k8s/README.md replayed in a copy of deploy/, then every other Kubernetes doc
    from where it leaves the reader, each apply rendered by ``kubectl kustomize``."""
    return doc_blocks.walk_docs(REPO, doc_blocks.kubernetes_docs(REPO),
                                tmp_path_factory.mktemp("docs"))
