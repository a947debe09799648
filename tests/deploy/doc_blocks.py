"""The commands the Kubernetes docs tell a reader to run, checked against the manifests.

A reader follows deploy/k8s/README.md from the top: it builds the image, copies the
example overlay, creates the Secrets, applies.  Every other doc (the Slurm docs,
docs/kubernetes.md, the comments of the manifests themselves) is read by someone who
did that first.  This module replays what those commands do to the files (``cp -r``,
``mkdir -p``, ``cat >> FILE <<'EOF'``) in a copy of ``deploy/``, renders what they
apply or render with ``kubectl kustomize`` (no cluster), and reports each command that
names a Secret, a key, a ConfigMap, a namespace, an object, an image, a make target or
variable, or a setting that the manifests, the Makefile or the settings do not have, or
that applies placeholders over what the reader created.

Commands come from the shell blocks (```sh, ```bash, ```shell, ```console) of a
Markdown file, from its inline code that starts with ``kubectl `` or ``make ``, and, in
a YAML file, from its comments: an indented ``#   kubectl ...`` line or inline code.
Every mismatch names the doc and the line (``deploy/k8s/README.md:94: ...``).

    walk = walk_docs(repo, kubernetes_docs(repo), workdir)
    problems = walk.mismatches + check(walk, repo, settings=...)

``walk_docs`` does not need taskenv; ``settings`` (the ``TASKENV_*`` names) is passed in.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

Doc = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name)

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([\w+-]*)")
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
RUNNABLE = ("kubectl ", "make ")
COMMENT_COMMAND = re.compile(r"^ {2,}((?:kubectl|make) .*)$")
OPERATORS = frozenset({"|", "||", "&&", ";", "&"})
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
# kubectl flags that take the next word as their value when not written flag=value.
VALUE_FLAGS = frozenset({"-n", "--namespace", "-o", "--output", "-l", "--selector", "-f",
                         "--filename", "-k", "--kustomize", "-c", "--container", "--type",
                         "--from-file", "--from-literal", "--from-env-file", "--replicas",
                         "--timeout", "--context", "--kubeconfig"})
KINDS = {"deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
         "sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
         "hpa": "HorizontalPodAutoscaler", "horizontalpodautoscaler": "HorizontalPodAutoscaler",
         "horizontalpodautoscalers": "HorizontalPodAutoscaler",
         "svc": "Service", "service": "Service", "services": "Service",
         "cm": "ConfigMap", "configmap": "ConfigMap", "configmaps": "ConfigMap",
         "secret": "Secret", "secrets": "Secret",
         "pvc": "PersistentVolumeClaim", "persistentvolumeclaim": "PersistentVolumeClaim",
         "persistentvolumeclaims": "PersistentVolumeClaim",
         "scaledobject": "ScaledObject", "scaledobjects": "ScaledObject",
         "pdb": "PodDisruptionBudget", "poddisruptionbudget": "PodDisruptionBudget",
         "ingress": "Ingress", "ing": "Ingress"}
OBJECT_VERBS = frozenset({"get", "describe", "delete", "scale", "edit", "patch", "label",
                          "annotate", "rollout", "logs", "exec", "port-forward"})
WORKLOADS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"})
PLACEHOLDER = "REPLACE-ME"
STOPWORDS = frozenset({"the", "then", "your", "a", "an", "of", "and", "first", "to", "in",
                       "on", "with", "for", "as", "it", "its"})
STEPS_HEADING = "step by step"


# --- reading the docs -------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """One simple command (a pipeline's part) a doc tells its reader to run."""

    doc: str  # the doc's path in the repository
    line: int  # the line it starts on
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()  # NAME=value words before it
    heredoc: str | None = None  # the text of its <<EOF, if any
    block: int = 0  # the shell block (or the inline span) it is in
    text: str = ""  # as written

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


@dataclass
class Prose:
    """A doc's text that is not code, line numbers kept (for its references)."""

    doc: str
    text: str

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


@dataclass
class Parsed:
    commands: list[Command]
    prose: Prose
    unparsable: list[str] = field(default_factory=list)


def shipped(repo: Path, under: str) -> list[Path]:
    """The files under ``under`` that the repository ships: those git tracks, and any
    other beside them in a directory it ships files in.  A directory of the reader's own
    (the overlay the README has them copy from the example, ``overlays/prod``) is theirs,
    not the repository's: its files are not checked as the repository's.  Outside a git
    checkout, every file."""
    top = repo / under
    every = sorted(p for p in top.rglob("*") if p.is_file())
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", under], cwd=repo,
                                capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return every
    tracked = {repo / name for name in listed.decode().split("\0") if name}
    if not tracked:  # not a checkout of this repository (a bare copy): all of it
        return every
    directories = {path.parent for path in tracked}
    return [p for p in every if p in tracked or p.parent in directories]


def kubernetes_docs(repo: Path) -> list[str]:
    """deploy/k8s/README.md first (the walkthrough the others assume), then the Slurm
    READMEs, docs/kubernetes.md and every shipped manifest's comments."""
    docs = ["deploy/k8s/README.md"]
    docs += sorted(str(p.relative_to(repo)) for p in (repo / "deploy" / "slurm").rglob("README.md"))
    docs.append("docs/kubernetes.md")
    for top in ("deploy/k8s", "deploy/slurm"):
        docs += [str(p.relative_to(repo)) for p in shipped(repo, top) if p.suffix == ".yaml"]
    return [d for d in docs if (repo / d).is_file()]


def parse(repo: Path, doc: str) -> Parsed:
    text = (repo / doc).read_text()
    return _parse_yaml(doc, text) if doc.endswith((".yaml", ".yml")) else _parse_markdown(doc, text)


def _parse_markdown(doc: str, text: str) -> Parsed:
    lines = text.splitlines()
    prose: list[str] = []
    out = Parsed([], Prose(doc, ""))
    block = 0
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            prose.append(lines[i])
            i += 1
            continue
        indent, marker, language = len(fence.group(1)), fence.group(2), fence.group(3)
        body: list[tuple[int, str]] = []
        prose.append("")
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            line = lines[i]
            body.append((i + 1, line[min(indent, len(line) - len(line.lstrip(" "))):]))
            prose.append("")
            i += 1
        prose.append("")
        i += 1
        if language in SHELL_LANGUAGES:
            block += 1
            _split(doc, body, block, out)
    out.prose = Prose(doc, "\n".join(prose))
    return _with_inline_commands(doc, out, block)


def _parse_yaml(doc: str, text: str) -> Parsed:
    comments: list[str] = []
    out = Parsed([], Prose(doc, ""))
    block = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        comment = stripped[1:] if stripped.startswith("#") else ""
        comments.append(comment.strip())
        command = COMMENT_COMMAND.match(comment)
        if command:
            block += 1
            _split(doc, [(number, command.group(1))], block, out)
    out.prose = Prose(doc, "\n".join(comments))
    return _with_inline_commands(doc, out, block)


def _with_inline_commands(doc: str, out: Parsed, block: int) -> Parsed:
    """``out`` with the runnable commands quoted inline in its prose, each a block of its
    own after the ``block`` fenced ones, every command in the order of its line."""
    for span in INLINE.finditer(out.prose.text):
        words = " ".join(span.group(1).split())
        if words.startswith(RUNNABLE):
            block += 1
            _split(doc, [(out.prose.line_of(span.start()), words)], block, out)
    out.commands.sort(key=lambda c: (c.line, c.block))
    return out


def _split(doc: str, lines: list[tuple[int, str]], block: int, out: Parsed) -> None:
    """Shell lines into simple commands: continuations joined, here-documents read."""
    i = 0
    while i < len(lines):
        start, text = lines[i]
        while i + 1 < len(lines) and (text.rstrip().endswith("\\")
                                      or re.search(r"(\||&&)\s*$", text)):
            text = text.rstrip().removesuffix("\\") + " " + lines[i + 1][1].strip()
            i += 1
        heredoc = None
        here = re.search(r"<<-?\s*(['\"]?)(\w+)\1", text)
        if here:
            body = []
            i += 1
            while i < len(lines) and lines[i][1].strip() != here.group(2):
                body.append(lines[i][1])
                i += 1
            heredoc = "".join(line + "\n" for line in body)
            text = text[:here.start()] + text[here.end():]
        i += 1
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars="|&;")
            lexer.whitespace_split = True
            lexer.commenters = ""
            words = list(lexer)
        except ValueError as error:
            out.unparsable.append(f"{doc}:{start}: {text.strip()}: {error}")
            continue
        for n, word in enumerate(words):
            if word.startswith("#"):
                words = words[:n]
                break
        segment: list[str] = []
        for word in [*words, ";"]:
            if word not in OPERATORS:
                segment.append(word)
                continue
            env = []
            while segment and (assignment := ASSIGNMENT.match(segment[0])):
                env.append((assignment.group(1), assignment.group(2)))
                segment.pop(0)
            if segment or env:
                out.commands.append(Command(doc, start, tuple(segment), tuple(env), heredoc,
                                            block, text.strip()))
                heredoc = None
            segment = []


# --- what the manifests hold ------------------------------------------------------------------

def is_placeholder(word: str) -> bool:
    """``...``, ``<job>``, or an upper-case word (DIR, NAME, N) standing for the reader's own."""
    if re.search(r"\.\.\.|…|<[^>]*>", word):
        return True
    parts = [p for p in re.split(r"[/=]", word) if p]
    return any(re.fullmatch(r"[A-Z][A-Z0-9_]*", p) for p in parts)


def object_key(doc: Doc) -> Key:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


def _pod_templates(docs: Iterable[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for doc in docs:
        if doc.get("kind") not in WORKLOADS:
            continue
        spec = doc["spec"]
        if doc["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        yield doc, spec["template"]["spec"]


def reads(docs: list[Doc]) -> dict[Key, set[str]]:
    """Every Secret and ConfigMap the pods (and KEDA's TriggerAuthentications) of ``docs``
    read, with the keys they read by name: a ``*KeyRef``'s key, a volume's ``items``, or,
    for a whole volume, the file names under its mount path that the container is told
    about (its command, args, env values and the ConfigMaps it reads its env from)."""
    configmaps = {object_key(d): d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"}
    out: dict[Key, set[str]] = {}

    def add(kind: str, namespace: str, name: str, keys: Iterable[str] = ()) -> None:
        out.setdefault((kind, namespace, name), set()).update(keys)

    for workload, pod in _pod_templates(docs):
        namespace = workload["metadata"].get("namespace", "")
        containers = pod.get("initContainers", []) + pod.get("containers", [])
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in containers:
            told = list(container.get("command", [])) + list(container.get("args", []))
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    add("Secret", namespace, source["secretRef"]["name"])
                if "configMapRef" in source:
                    name = source["configMapRef"]["name"]
                    add("ConfigMap", namespace, name)
                    told += [str(v) for v in configmaps.get(("ConfigMap", namespace, name),
                                                            {}).values()]
            for env in container.get("env", []):
                told.append(str(env.get("value", "")))
                ref = env.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    add("Secret", namespace, ref["secretKeyRef"]["name"],
                        [ref["secretKeyRef"]["key"]])
                if "configMapKeyRef" in ref:
                    add("ConfigMap", namespace, ref["configMapKeyRef"]["name"],
                        [ref["configMapKeyRef"]["key"]])
            for mount in container.get("volumeMounts", []):
                volume = volumes.get(mount["name"], {})
                sources = [volume] + volume.get("projected", {}).get("sources", [])
                for source in sources:
                    for kind, field_name, name_field in (("Secret", "secret", "secretName"),
                                                         ("ConfigMap", "configMap", "name")):
                        if field_name not in source:
                            continue
                        ref = source[field_name]
                        name = ref.get(name_field) or ref.get("name")
                        if ref.get("items"):
                            add(kind, namespace, name, [item["key"] for item in ref["items"]])
                            continue
                        under = re.escape(mount["mountPath"].rstrip("/")) + r"/([\w.-]+)"
                        add(kind, namespace, name,
                            [m for text in told for m in re.findall(under, text)])
    for doc in docs:
        if doc.get("kind") == "TriggerAuthentication":
            namespace = doc["metadata"].get("namespace", "")
            for ref in doc["spec"].get("secretTargetRef", []):
                add("Secret", namespace, ref["name"], [ref["key"]])
    return out


def images(docs: list[Doc]) -> dict[str, list[str]]:
    """image -> the workloads/containers that run it."""
    out: dict[str, list[str]] = {}
    for workload, pod in _pod_templates(docs):
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            out.setdefault(container["image"], []).append(
                f"{workload['metadata']['name']}/{container['name']}")
    return out


def image_name(image: str) -> str:
    """registry.example.com/platform/taskenv:1.0.0 -> taskenv"""
    return image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]


# --- replaying the docs -----------------------------------------------------------------------

class RenderError(Exception):
    pass


def kustomize(directory: Path) -> list[Doc]:
    """What ``kubectl apply -k directory`` would apply, rendered by kubectl's kustomize."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise RenderError("kubectl (with its built-in kustomize) is not on PATH")
    done = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RenderError(" ".join(done.stderr.split())[-400:])
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@dataclass(frozen=True)
class Mismatch:
    kind: str  # secret, configmap, namespace, object, make, setting, apply, image, render, ...
    where: str  # doc:line
    text: str  # the command, as written
    problem: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text}: {self.problem}"


@dataclass
class Render:
    command: Command
    target: str  # as the command names it
    objects: list[Doc]
    applied: bool  # kubectl apply (not only kubectl kustomize)
    checkout: str  # which replay (the walkthrough's or a later doc's)


@dataclass
class Created:
    command: Command
    kind: str  # Secret, ConfigMap, Namespace
    namespace: str
    name: str
    keys: set[str] | None  # None: not known from the command (--from-env-file)


@dataclass
class Walk:
    commands: list[Command] = field(default_factory=list)
    renders: list[Render] = field(default_factory=list)
    created: list[Created] = field(default_factory=list)
    built: list[tuple[Command, str]] = field(default_factory=list)  # images built or pushed
    mismatches: list[Mismatch] = field(default_factory=list)
    render: Callable[[Path], list[Doc]] = kustomize
    _cache: dict[tuple[str, str], list[Doc] | RenderError] = field(default_factory=dict)

    def rendered(self, root: Path, relative: str) -> list[Doc]:
        digest = hashlib.sha256()
        for path in sorted(p for p in (root / "deploy").rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
        key = (digest.hexdigest(), relative)
        if key not in self._cache:
            try:
                self._cache[key] = self.render(root / relative)
            except RenderError as error:
                self._cache[key] = error
        found = self._cache[key]
        if isinstance(found, RenderError):
            raise found
        return found


@dataclass
class _State:
    root: Path
    name: str
    created: dict[Key, Created] = field(default_factory=dict)
    built: tuple[Command, str] | None = None


def walk_docs(repo: Path, docs: Sequence[str], workdir: Path,
              render: Callable[[Path], list[Doc]] = kustomize) -> Walk:
    """Replay ``docs[0]`` in a copy of the repository's ``deploy/``, then each other doc in
    a copy of where ``docs[0]`` left it."""
    walk = Walk(render=render)
    first = _State(workdir / "walkthrough", docs[0])
    for path in shipped(repo, "deploy"):  # as the repository ships it: no overlay of the reader's
        target = first.root / path.relative_to(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    _replay(walk, first, _commands(repo, docs[0], walk))
    for n, doc in enumerate(docs[1:], 1):
        state = _State(workdir / f"doc-{n}", doc, dict(first.created), first.built)
        shutil.copytree(first.root, state.root, symlinks=True)
        _replay(walk, state, _commands(repo, doc, walk))
    return walk


def _commands(repo: Path, doc: str, walk: Walk) -> list[Command]:
    parsed = parse(repo, doc)
    walk.commands += parsed.commands
    walk.mismatches += [Mismatch("parse", line.split(": ", 1)[0], "", line.split(": ", 1)[1])
                        for line in parsed.unparsable]
    return parsed.commands


def _inside(root: Path, word: str) -> Path | None:
    if word.startswith(("/", "~")) or is_placeholder(word):
        return None
    path = (root / word).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def kubectl_args(argv: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(flags as (name, value), positional words) of ``kubectl ...``."""
    flags: list[tuple[str, str]] = []
    positional: list[str] = []
    i = 1
    while i < len(argv):
        word = argv[i]
        if word.startswith("--") and "=" in word:
            name, value = word.split("=", 1)
            flags.append((name, value))
        elif word.startswith("--") or word in VALUE_FLAGS:
            if word in VALUE_FLAGS and i + 1 < len(argv):
                flags.append((word, argv[i + 1]))
                i += 1
            else:
                flags.append((word, ""))
        elif word.startswith("-") and len(word) > 2:
            flags.append((word[:2], word[2:].removeprefix("=")))
        elif word.startswith("-") and len(word) > 1:
            flags.append((word, ""))
        else:
            positional.append(word)
        i += 1
    return flags, positional


def namespace_of(flags: list[tuple[str, str]]) -> str | None:
    values = [v for n, v in flags if n in ("-n", "--namespace")]
    return values[-1] if values else None


def created_by(command: Command) -> Created | None:
    """The Secret, ConfigMap or Namespace a ``kubectl create ...`` makes."""
    if command.argv[:1] != ("kubectl",):
        return None
    flags, words = kubectl_args(command.argv)
    namespace = namespace_of(flags) or "default"
    if words[:2] == ["create", "namespace"] and len(words) > 2:
        return Created(command, "Namespace", "", words[2], set())
    if words[:2] == ["create", "secret"] and len(words) > 3:
        kind, name = "Secret", words[3]
        if words[2] == "tls":
            return Created(command, kind, namespace, name, {"tls.crt", "tls.key"})
        if words[2] == "docker-registry":
            return Created(command, kind, namespace, name, {".dockerconfigjson"})
    elif words[:2] == ["create", "configmap"] and len(words) > 2:
        kind, name = "ConfigMap", words[2]
    else:
        return None
    keys: set[str] = set()
    for flag, value in flags:
        if flag == "--from-literal":
            keys.add(value.split("=", 1)[0])
        elif flag == "--from-file":
            key, _, path = value.rpartition("=")
            keys.add(key or PurePosixPath(path).name)
    known = not any(flag == "--from-env-file" for flag, _ in flags)
    return Created(command, kind, namespace, name, keys if known else None)


def _replay(walk: Walk, state: _State, commands: list[Command]) -> None:
    for command in commands:
        argv = command.argv
        if not argv:
            continue
        if argv[0] == "cp" and len(argv) >= 3 and any(a in ("-r", "-R", "-a") for a in argv):
            words = [a for a in argv[1:] if not a.startswith("-")]
            source, target = (_inside(state.root, w) for w in (words[0], words[-1]))
            if source and target and source.is_dir():
                if target.exists():
                    target = target / source.name
                shutil.copytree(source, target)
        elif argv[0] == "mkdir":
            for word in argv[1:]:
                path = _inside(state.root, word) if not word.startswith("-") else None
                if path:
                    path.mkdir(parents=True, exist_ok=True)
        elif argv[0] in ("cat", "tee") and command.heredoc is not None:
            append = ">>" in argv or "-a" in argv
            words = [a for a in argv[1:] if a not in (">", ">>", "-a")]
            path = _inside(state.root, words[-1].lstrip(">")) if words else None
            if path:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a" if append else "w") as out:
                    out.write(command.heredoc)
        elif argv[0] == "make":
            for word in argv[1:]:
                name, _, value = word.partition("=")
                if value and name.endswith("IMAGE") and not is_placeholder(value):
                    state.built = (command, value)
                    walk.built.append(state.built)
        elif argv[:2] == ("podman", "push") and len(argv) > 2 and not is_placeholder(argv[-1]):
            state.built = (command, argv[-1])
            walk.built.append(state.built)
        elif argv[0] == "kubectl":
            _kubectl(walk, state, command)


def _kubectl(walk: Walk, state: _State, command: Command) -> None:
    flags, words = kubectl_args(command.argv)
    made = created_by(command)
    if made:
        state.created[(made.kind, made.namespace, made.name)] = made
        walk.created.append(made)
        return
    verb = words[0] if words else ""
    if verb == "kustomize" and len(words) > 1:
        targets, applied = [("-k", words[1])], False
    elif verb in ("apply", "create", "diff", "replace"):
        targets = [(n, v) for n, v in flags if n in ("-k", "--kustomize", "-f", "--filename")]
        applied = verb != "diff"
    else:
        return
    for flag, target in targets:
        if target == "-" or is_placeholder(target):
            continue
        path = _inside(state.root, target)
        if path is None or not path.exists():
            walk.mismatches.append(Mismatch("render", command.where, command.text,
                                            f"{target} does not exist (nothing before makes it)"))
            continue
        try:
            if flag in ("-k", "--kustomize"):
                objects = walk.rendered(state.root, str(path.relative_to(state.root.resolve())))
            else:
                files = sorted(path.rglob("*.yaml")) if path.is_dir() else [path]
                objects = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
        except RenderError as error:
            walk.mismatches.append(Mismatch("render", command.where, command.text,
                                            f"{target} does not render: {error}"))
            continue
        walk.renders.append(Render(command, target, objects, applied, state.name))
        if applied:
            _check_apply(walk, state, command, objects)


def _check_apply(walk: Walk, state: _State, command: Command, objects: list[Doc]) -> None:
    def problem(kind: str, text: str) -> None:
        walk.mismatches.append(Mismatch(kind, command.where, command.text, text))

    for doc in objects:
        key = object_key(doc)
        if PLACEHOLDER in yaml.safe_dump(doc):
            problem("apply", f"applies the placeholders ({PLACEHOLDER}) of {key[0]} "
                             f"{key[1]}/{key[2]}")
        if key in state.created:
            problem("apply", f"overwrites {key[0]} {key[1]}/{key[2]}, which "
                             f"{state.created[key].command.where} created")
    present = {object_key(d) for d in objects}
    for key in reads(objects):
        if key not in present and key not in state.created:
            problem("apply", f"its pods read {key[0]} {key[1]}/{key[2]}, which neither it "
                             "nor any command before it creates")
    if state.built is not None:
        built_by, built = state.built
        running = images(objects)
        wrong = [(image, users) for image, users in sorted(running.items())
                 if image != built and image_name(image) == image_name(built)]
        for image, users in wrong:
            problem("image", f"{', '.join(users)} run {image}, not {built} "
                             f"(built at {built_by.where})")
        if running and built not in running and not wrong:
            problem("image", f"nothing runs {built}, the image built at {built_by.where}")


# --- checking every command against the manifests ---------------------------------------------

@dataclass
class Catalogue:
    """What the manifests define: objects, the keys of Secrets and ConfigMaps, namespaces."""

    objects: dict[Key, Doc] = field(default_factory=dict)
    keys: dict[Key, set[str]] = field(default_factory=dict)
    namespaces: set[str] = field(default_factory=set)

    def add(self, docs: Iterable[Doc]) -> None:
        docs = list(docs)
        for doc in docs:
            key = object_key(doc)
            self.objects.setdefault(key, doc)
            if doc["kind"] == "Namespace":
                self.namespaces.add(doc["metadata"]["name"])
            if doc["kind"] in ("Secret", "ConfigMap"):
                names = set(doc.get("data") or {}) | set(doc.get("stringData") or {}) \
                    | set(doc.get("binaryData") or {})
                self.keys.setdefault(key, set()).update(names)
        for key, names in reads(docs).items():
            self.keys.setdefault(key, set()).update(names)

    def named(self, kind: str, name: str) -> list[Key]:
        return sorted(k for k in self.keys | self.objects if k[0] == kind and k[2] == name)

    def holding(self, kind: str, key_name: str) -> list[Key]:
        return sorted(k for k, names in self.keys.items() if k[0] == kind and key_name in names)


def catalogue(walk: Walk, repo: Path, declared: Sequence[str] = ("deploy/k8s/base",)) -> Catalogue:
    """Every object the docs' commands render or apply, and the ``declared`` kustomizations
    (the base's placeholder Secrets, which name the keys the real ones hold)."""
    out = Catalogue()
    for directory in declared:
        out.add(walk.render(repo / directory))
    for render in walk.renders:
        out.add(render.objects)
    out.namespaces |= {c.name for c in walk.created if c.kind == "Namespace"}
    return out


def makefile(repo: Path) -> tuple[set[str], set[str]]:
    """(targets, variables it reads with $(NAME) or ${NAME}) of the repository's Makefile."""
    text = (repo / "Makefile").read_text()
    targets = {t for line in text.splitlines()
               for t in re.findall(r"^([A-Za-z0-9][\w.-]*)(?=\s*:(?!=))", line)}
    variables = set(re.findall(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]", text))
    return targets, variables


def make_mismatches(repo: Path, commands: Iterable[Command]) -> list[Mismatch]:
    """Each ``make ...`` of ``commands`` names targets the Makefile has and variables it reads."""
    targets, variables = makefile(repo)
    out: list[Mismatch] = []
    for command in commands:
        if command.argv[:1] == ("make",):
            _check_make(command, targets, variables,
                        lambda kind, text, c=command: out.append(Mismatch(kind, c.where, c.text,
                                                                          text)))
    return out


def check(walk: Walk, repo: Path, settings: set[str] | None = None,
          declared: Sequence[str] = ("deploy/k8s/base",)) -> list[Mismatch]:
    """Each command of ``walk`` against the manifests (``catalogue``), the Makefile and, when
    given, the names of the settings (``TASKENV_*`` words set before a command)."""
    known = catalogue(walk, repo, declared)
    local: dict[tuple[str, int], set[str]] = {}  # namespaces a block itself makes its tasks in
    for command in walk.commands:
        for name, value in command.env:
            if name.endswith("KUBE_NAMESPACE"):
                local.setdefault((command.doc, command.block), set()).add(value)
    out = make_mismatches(repo, walk.commands)
    for command in walk.commands:
        def problem(kind: str, text: str, command: Command = command) -> None:
            out.append(Mismatch(kind, command.where, command.text, text))

        if settings is not None:
            for name, _ in command.env:
                if name.startswith("TASKENV_") and name not in settings:
                    problem("setting", f"{name} is no setting")
        if command.argv[:1] == ("kubectl",):
            _check_kubectl(command, known, local.get((command.doc, command.block), set()),
                           problem)
    return out


def _check_make(command: Command, targets: set[str], variables: set[str],
                problem: Callable[[str, str], None]) -> None:
    if any(w.startswith(("-C", "-f", "--directory", "--file")) for w in command.argv[1:]):
        return
    for word in command.argv[1:]:
        if word.startswith("-"):
            continue
        name, assigned, _ = word.partition("=")
        if assigned and name not in variables:
            problem("make", f"the Makefile reads no variable {name} "
                            f"(it reads {', '.join(sorted(v for v in variables if v.isupper()))})")
        elif not assigned and word not in targets:
            problem("make", f"the Makefile has no target {word}")


def _check_kubectl(command: Command, known: Catalogue, local: set[str],
                   problem: Callable[[str, str], None]) -> None:
    flags, words = kubectl_args(command.argv)
    verb = words[0] if words else ""
    namespace = namespace_of(flags)
    if namespace is not None and not is_placeholder(namespace) \
            and namespace not in known.namespaces | local:
        problem("namespace", f"namespace {namespace}: the manifests create "
                             f"{', '.join(sorted(known.namespaces))}")
        return
    if namespace in local:
        return  # a namespace the service makes its own tasks in, not the manifests'
    namespace = namespace or "default"
    made = created_by(command)
    if made and made.kind in ("Secret", "ConfigMap"):
        _check_keys(made.kind, namespace, made.name, made.keys, known, problem, creates=True)
        return
    if verb not in OBJECT_VERBS:
        return
    for kind, name in _named_objects(words):
        if kind == "Secret" and verb == "get":
            output = "".join(v for n, v in flags if n in ("-o", "--output"))
            read = set(re.findall(r"\{\.data\.([\w.-]+?)\}", output.replace("\\.", "."))) \
                | set(re.findall(r"\.data\[['\"]([^'\"]+)['\"]\]", output))
            _check_keys(kind, namespace, name, read, known, problem, creates=False)
        elif kind in ("Secret", "ConfigMap"):
            _check_keys(kind, namespace, name, set(), known, problem, creates=False)
        elif (kind, namespace, name) not in known.objects:
            elsewhere = [f"{k[1]}/{k[2]}" for k in known.named(kind, name)]
            problem("object", f"no {kind} {namespace}/{name} in the manifests"
                              + (f" (there is {', '.join(elsewhere)})" if elsewhere else ""))


def _named_objects(words: list[str]) -> Iterator[tuple[str, str]]:
    """(kind, name) of every object ``kubectl VERB ...`` names; kinds the manifests do not
    hold (Jobs, pods: taskenv makes them at run time) and placeholders are left out."""
    rest = words[2:] if words[:1] == ["rollout"] else words[1:]
    if not rest:
        return
    if "/" in rest[0]:
        for word in rest:
            kind, _, name = word.partition("/")
            if kind.lower() in KINDS and name and not is_placeholder(name):
                yield KINDS[kind.lower()], name
        return
    kinds = rest[0].lower().split(",")
    if len(kinds) == 1 and kinds[0] in KINDS:
        for name in rest[1:]:
            if not is_placeholder(name):
                yield KINDS[kinds[0]], name


def _check_keys(kind: str, namespace: str, name: str, keys: set[str] | None, known: Catalogue,
                problem: Callable[[str, str], None], creates: bool) -> None:
    if is_placeholder(name):
        return
    key = (kind, namespace, name)
    if key not in known.keys and key not in known.objects:
        elsewhere = known.named(kind, name)
        if elsewhere:
            problem(kind.lower(), f"{kind} {name} lives in namespace "
                                  f"{', '.join(k[1] for k in elsewhere)}, not {namespace}")
        else:
            problem(kind.lower(), f"no manifest defines or reads a {kind} {name} "
                                  f"(in namespace {namespace})")
        return
    if keys is None:
        return
    defined = known.keys.get(key, set())
    for missing in sorted(keys - defined):
        holders = [f"{k[1]}/{k[2]}" for k in known.holding(kind, missing)]
        elsewhere = f"; {missing} is in {kind} {', '.join(holders)}" if holders else ""
        problem(kind.lower(), f"{kind} {namespace}/{name} has no key {missing} (its keys: "
                              f"{', '.join(sorted(defined)) or 'none'}){elsewhere}")
    if creates and defined:
        for lacking in sorted(defined - keys):
            problem(kind.lower(), f"creates {kind} {namespace}/{name} without the key {lacking}, "
                                  "which the manifests read or declare")


# --- references between the docs --------------------------------------------------------------

def _segments(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence, list item or paragraph of ``text``."""
    cuts = {0, len(text)}
    for boundary in re.finditer(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)|(?<=[.!?])\s+(?=\S)", text):
        cuts.add(boundary.start())
    ordered = sorted(cuts)
    yield from zip(ordered, ordered[1:], strict=False)


def _words(text: str) -> set[str]:
    out = set()
    for word in re.findall(r"[A-Za-z]+", text.lower()):
        if word in STOPWORDS:
            continue
        out.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return out


def steps(readme: str) -> dict[int, str]:
    """The numbered steps (``1. **Title.**``) of the README's step-by-step section."""
    heading = next((m for m in re.finditer(r"^#+ .*$", readme, re.MULTILINE)
                    if STEPS_HEADING in m.group(0).lower()), None)
    if heading is None:
        return {}
    section = readme[heading.end():]
    following = re.search(r"^#+ ", section, re.MULTILINE)
    section = section[:following.start()] if following else section
    return {int(n): title for n, title in
            re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, re.MULTILINE)}


def headings(text: str) -> set[str]:
    return {" ".join(h.split()) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


def reference_mismatches(repo: Path, docs: Sequence[str],
                         readme: str = "deploy/k8s/README.md") -> list[Mismatch]:
    """A step of ``readme`` (``step 3``; elsewhere ``README.md, step 3``) must exist and be
    about what the sentence naming it is about: the sentence shares a word with the step's
    title.  A quoted section (``docs/launchers.md, "Pointing ..."``) must be a heading there."""
    readme_text = (repo / readme).read_text()
    titled = steps(readme_text)
    out: list[Mismatch] = []
    for doc in docs:
        prose = parse(repo, doc).prose
        text = prose.text
        in_readme = doc == readme
        pattern = (r"\bsteps? (\d+)(?:\s+(?:to|and|or)\s+(\d+))?" if in_readme else
                   r"README\.md,?(?:\s+\"[^\"]*\",?)?\s+steps? (\d+)(?:\s+(?:to|and|or)\s+(\d+))?")
        points_at_readme = in_readme or Path(doc).parent == Path(readme).parent or readme in text
        for ref in re.finditer(pattern, text) if points_at_readme else ():
            where = f"{doc}:{prose.line_of(ref.start())}"
            numbers = [int(n) for n in ref.groups() if n]
            for number in numbers:
                if number not in titled:
                    out.append(Mismatch("step", where, ref.group(0),
                                        f"{readme} has no step {number} (it has "
                                        f"{', '.join(map(str, sorted(titled)))})"))
            if len(numbers) != 1 or numbers[0] not in titled:
                continue
            start, end = next((s, e) for s, e in _segments(text) if s <= ref.start() < e)
            sentence = text[start:end]
            title_words = _words(titled[numbers[0]])
            if not title_words & _words(sentence.replace(ref.group(0), " ")):
                fits = [n for n, t in titled.items() if _words(t) & _words(sentence)]
                out.append(Mismatch(
                    "step", where, " ".join(sentence.split()),
                    f"step {numbers[0]} of {readme} is \"{titled[numbers[0]]}\""
                    + (f"; its words fit step {', '.join(map(str, fits))}" if fits else "")))
        for ref in re.finditer(r"([\w./-]+\.md)`?,?\s+\"([^\"]+)\"", text):
            target = ref.group(1)
            # Relative to the doc, or to the nearest directory above it that has it (a
            # manifest's "README.md" is its deployment's), or to the repository.
            candidates = [d / target for d in (repo / doc).parents if d.is_relative_to(repo)]
            path = next((c for c in candidates if c.is_file()), repo / target)
            if not path.is_file():
                out.append(Mismatch("section", f"{doc}:{prose.line_of(ref.start())}",
                                    ref.group(0), f"no file {target}"))
                continue
            title = " ".join(ref.group(2).split())
            if title not in headings(path.read_text()):
                out.append(Mismatch("section", f"{doc}:{prose.line_of(ref.start())}",
                                    " ".join(ref.group(0).split()),
                                    f"{target} has no heading \"{title}\""))
    return out
