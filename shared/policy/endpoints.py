"""Endpoint variables: names whose value says where a program sends its credentials or
fetches code.

Whoever sets ``HF_ENDPOINT`` (or ``WANDB_BASE_URL``, ``HTTPS_PROXY``, ``PATH``, ``CC``,
``PAGER``, ...) for someone else's task reads that task's tokens, or hands it their
code, without running anything in it: ``huggingface_hub`` sends ``HF_TOKEN`` to the
endpoint it is given.  Where programs send credentials is the platform's call: only the
platform's policy may give such a name a value, unless it allows one project a name
(``endpoint_allowances`` in the platform's policy, an admin's: ``{"project": "vision",
"name": "HF_ENDPOINT", "reason": "..."}``), say for a project's own Hub mirror.  A
project's maintainer may still *protect* one without a value, and a user may set one in
their own task.

The list is a platform setting, ``TASKENV_ENDPOINT_VARIABLES``, in the grammar of
``TASKENV_STARTUP_HOOKS`` (``shared.policy.namelist``).  The start-up hooks
(``shared.policy.hooks``) already hold pip's index and the trust stores, git's commands
and NCCL's plugins: they are not repeated here, and no project may be allowed them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import Problem
from shared.policy.namelist import VariableList, parse_setting, valued_entries

# pattern -> what setting it does (the documentation that says so).
DEFAULT: dict[str, str] = {
    # Services' endpoints: where a client sends the task's token.
    "HF_ENDPOINT": "huggingface_hub sends HF_TOKEN to this Hub and downloads models from it "
                   "(huggingface_hub's environment variables)",
    "HUGGINGFACE_CO_RESOLVE_ENDPOINT": "older huggingface_hub and transformers send the token "
                                       "to, and download from, this Hub (the deprecated name "
                                       "of HF_ENDPOINT, huggingface_hub's constants)",
    "HF_INFERENCE_ENDPOINT": "huggingface_hub sends HF_TOKEN to this inference API "
                             "(huggingface_hub's environment variables)",
    "WANDB_BASE_URL": "wandb sends WANDB_API_KEY and every run's data to this server "
                      "(W&B's environment variables)",
    "WANDB_CONFIG_DIR": "wandb reads its settings, base_url among them, from this directory "
                        "(W&B's environment variables)",
    "MLFLOW_TRACKING_URI": "mlflow sends its token or password, and every run's data, to this "
                           "server (MLflow's tracking docs)",
    "MLFLOW_REGISTRY_URI": "mlflow registers models on, and loads them, pickles included, "
                           "from this server (MLflow's model registry docs)",
    "MLFLOW_S3_ENDPOINT_URL": "mlflow stores and loads artifacts at this S3 endpoint with the "
                              "task's AWS credentials (MLflow's artifact stores docs)",
    "AWS_ENDPOINT_URL": "boto3 and the AWS CLI send requests signed with the task's AWS keys "
                        "to this endpoint, and read data back from it (AWS SDKs' "
                        "service-specific endpoints)",
    "AWS_ENDPOINT_URL_*": "boto3 and the AWS CLI send one service's signed requests to this "
                          "endpoint (AWS SDKs' service-specific endpoints)",
    "AWS_CONFIG_FILE": "boto3 and the AWS CLI read profiles from it, a credential_process "
                       "command and endpoint_url among them (AWS CLI configuration docs)",
    "AWS_CA_BUNDLE": "boto3 and the AWS CLI trust the certificates in this file (AWS CLI "
                     "configuration docs)",
    "OPENAI_BASE_URL": "the openai client sends OPENAI_API_KEY to this API (openai-python's "
                       "README)",
    "ANTHROPIC_BASE_URL": "the anthropic client sends ANTHROPIC_API_KEY to this API "
                          "(anthropic-sdk-python's README)",
    "VAULT_ADDR": "the vault CLI sends VAULT_TOKEN to this server (Vault's CLI docs)",
    "DOCKER_HOST": "docker sends its commands and registry credentials to this daemon "
                   "(docker(1) environment variables)",
    "DOCKER_CONFIG": "docker reads registry credentials, and the credential helpers it runs, "
                     "from this directory (docker(1) environment variables)",
    "CONTAINER_HOST": "podman sends its commands to this service (podman(1))",
    "GH_HOST": "gh sends GH_TOKEN to this GitHub host (gh's environment docs)",
    "KUBECONFIG": "kubectl sends its token to the server this file names, and runs its exec "
                  "plugins (kubectl's kubeconfig docs)",
    # Proxies: every request, its Authorization header included, passes through them.
    # curl, requests and pip read both cases; names are case-sensitive.
    "HTTP_PROXY": "requests and pip send plain-HTTP requests, headers included, through this "
                  "proxy (requests' proxies docs)",
    "http_proxy": "curl, wget, requests and pip send plain-HTTP requests through this proxy "
                  "(curl(1) ENVIRONMENT)",
    "HTTPS_PROXY": "curl, requests and pip send HTTPS requests through this proxy, which "
                   "sees where they go (curl(1) ENVIRONMENT)",
    "https_proxy": "curl, wget, requests and pip send HTTPS requests through this proxy "
                   "(curl(1) ENVIRONMENT)",
    "ALL_PROXY": "curl and requests send every request through this proxy (curl(1) "
                 "ENVIRONMENT)",
    "all_proxy": "curl and requests send every request through this proxy (curl(1) "
                 "ENVIRONMENT)",
    "NO_PROXY": "curl and requests reach these hosts directly, around the platform's proxy "
                "(curl(1) ENVIRONMENT)",
    "no_proxy": "curl, wget and requests reach these hosts directly, around the platform's "
                "proxy (curl(1) ENVIRONMENT)",
    "PIP_PROXY": "pip sends its requests through this proxy (pip's configuration docs)",
    "SSLKEYLOGFILE": "curl, Python's ssl and NSS write each TLS session's keys to this file, "
                     "which decrypts the task's traffic, tokens included (Python's ssl docs, "
                     "curl(1))",
    # Switches that turn TLS verification off: with a proxy, a man in the middle.
    "GIT_SSL_NO_VERIFY": "git stops verifying the server's certificate (git(1))",
    "NODE_TLS_REJECT_UNAUTHORIZED": "0 makes node accept any certificate (Node.js CLI docs)",
    "PYTHONHTTPSVERIFY": "0 makes Python's urllib accept any certificate where the build "
                         "honours it (PEP 493)",
    "HOSTALIASES": "the resolver maps host names to the names in this file (hostname(7))",
    "LOCALDOMAIN": "the resolver completes short host names with these domains "
                   "(resolv.conf(5))",
    "CURL_HOME": "curl reads .curlrc from it: proxies, headers, extra options (curl(1))",
    "WGETRC": "wget reads proxies and headers from this file (wget(1))",
    # Package indexes and registries: where code is fetched (pip's index and config file
    # are start-up hooks).
    "PIP_FIND_LINKS": "pip installs packages found at these URLs or paths (pip's "
                      "configuration docs)",
    "PIP_TRUSTED_HOST": "pip accepts this host over plain HTTP or with an invalid "
                        "certificate (pip's configuration docs)",
    "UV_INDEX_URL": "uv installs packages from this index (uv's environment variables)",
    "UV_EXTRA_INDEX_URL": "uv installs packages from this index too (uv's environment "
                          "variables)",
    "UV_DEFAULT_INDEX": "uv installs packages from this index (uv's environment variables)",
    "UV_INDEX": "uv installs packages from these indexes too (uv's environment variables)",
    "UV_FIND_LINKS": "uv installs packages found at these URLs or paths (uv's environment "
                     "variables)",
    "UV_INSECURE_HOST": "uv accepts this host over plain HTTP or with an invalid certificate "
                        "(uv's environment variables)",
    "UV_CONFIG_FILE": "uv reads its configuration, indexes included, from this file (uv's "
                      "environment variables)",
    "UV_PYTHON_INSTALL_MIRROR": "uv downloads the Python builds it installs from this mirror "
                                "(uv's environment variables)",
    "CONDARC": "conda reads its configuration, channels included, from this file (conda's "
               "configuration docs)",
    "CONDA_CHANNELS": "conda installs packages from these channels (conda's configuration "
                      "docs: each .condarc key is read from CONDA_<KEY>)",
    "CONDA_DEFAULT_CHANNELS": "conda installs packages from these channels (conda's "
                              "configuration docs)",
    "CONDA_CHANNEL_ALIAS": "conda resolves every channel name under this URL (conda's "
                           "configuration docs)",
    "NPM_CONFIG_REGISTRY": "npm installs packages from, and sends its auth token to, this "
                           "registry (npm-config(7))",
    "npm_config_registry": "npm installs packages from, and sends its auth token to, this "
                           "registry (npm-config(7))",
    "NPM_CONFIG_USERCONFIG": "npm reads its .npmrc, registries and tokens included, from this "
                             "file (npm-config(7))",
    "npm_config_userconfig": "npm reads its .npmrc from this file (npm-config(7))",
    "GOPROXY": "go downloads modules from this proxy (go help environment)",
    "GOSUMDB": "go checks downloaded modules against this checksum database; off checks "
               "nothing (go help environment)",
    "GOFLAGS": "go takes flags from it, -toolexec (a program run for each build tool) among "
               "them (go help environment)",
    # Search paths and the programs tools run.
    "PATH": "every command a step runs by name (python, git, curl) is looked up in these "
            "directories, first to last (execvp(3), bash(1))",
    "CC": "make, setuptools, triton and torch.utils.cpp_extension run this C compiler "
          "(GNU make's implicit variables)",
    "CXX": "make, setuptools and torch.utils.cpp_extension run this C++ compiler (GNU make's "
           "implicit variables)",
    "CPP": "make runs this C preprocessor (GNU make's implicit variables)",
    "FC": "make and numpy.f2py run this Fortran compiler (GNU make's implicit variables)",
    "LD": "make runs this linker (GNU make's implicit variables)",
    "CFLAGS": "the C compiler takes options from it when make or setuptools builds, "
              "-fplugin (a library it loads) among them (gcc(1))",
    "CXXFLAGS": "the C++ compiler takes options from it, -fplugin among them (gcc(1))",
    "CPPFLAGS": "the preprocessor takes options from it, -include among them (gcc(1))",
    "LDFLAGS": "the linker takes options from it, libraries to link among them (ld(1))",
    "CUDA_HOME": "torch.utils.cpp_extension runs nvcc from it (torch.utils.cpp_extension "
                 "docs)",
    "CUDA_PATH": "CUDA builds run nvcc from it (CUDA installation guide)",
    "TRITON_*_PATH": "triton runs the ptxas, cuobjdump or nvdisasm, or loads the libcuda, "
                     "named here (triton's knobs)",
    "MAKEFILES": "GNU make reads these makefiles, whose recipes it runs, before any other "
                 "(GNU make's MAKEFILES variable)",
    "MAKEFLAGS": "make takes options and variable definitions, SHELL among them, from it "
                 "(GNU make's options/recursion docs)",
    "OMPI_MCA_plm_rsh_agent": "Open MPI runs this command to start processes on other nodes "
                              "(mpirun(1))",
    "OMPI_MCA_orte_rsh_agent": "older Open MPI runs this command to start processes on other "
                               "nodes (mpirun(1))",
    "PRTE_MCA_plm_ssh_agent": "Open MPI 5's PRRTE runs this command to start processes on "
                              "other nodes (prte(1))",
    "OMPI_MCA_mca_base_component_path": "Open MPI loads its components, libraries, from these "
                                        "directories (Open MPI's MCA docs)",
    "OMPI_MCA_mca_base_param_files": "Open MPI reads MCA parameters, the agent above among "
                                     "them, from these files (Open MPI's MCA docs)",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC": "Intel MPI runs this command to start processes on other "
                                  "nodes (Intel MPI's Hydra environment variables)",
    "HYDRA_LAUNCHER_EXEC": "MPICH's mpiexec runs this command to start processes on other "
                           "nodes (MPICH's Hydra docs)",
    "NCCL_CONF_FILE": "NCCL reads its settings from this file, a plugin to load among them "
                      "(NCCL environment variables)",
    "PAGER": "man, git, psql and many CLIs run this program to page their output "
             "(environ(7))",
    "MANPAGER": "man runs this program to page its output (man(1))",
    "GIT_PAGER": "git runs this program to page its output (git-var(1))",
    "LESSOPEN": "less runs this input preprocessor on every file it opens (less(1))",
    "LESSCLOSE": "less runs this command after each file LESSOPEN opened (less(1))",
    "EDITOR": "git, crontab and many CLIs run this editor (environ(7))",
    "VISUAL": "git, crontab and many CLIs run this editor first (environ(7))",
    "GIT_EDITOR": "git runs this editor (git-var(1))",
    "GIT_TEMPLATE_DIR": "git init and clone copy hooks from it, which git then runs "
                        "(git-init(1))",
    "SSH_ASKPASS": "ssh runs this program to ask for a passphrase (ssh(1))",
    # Where models, kernels and modules are loaded from: a pickle or a compiled kernel
    # put there runs in the task.
    "HF_HOME": "huggingface_hub keeps the login token (HF_HOME/token) and its cache here, "
               "and loads models from it (huggingface_hub's environment variables)",
    "HF_TOKEN_PATH": "huggingface_hub reads and writes the login token in this file "
                     "(huggingface_hub's environment variables)",
    "HF_HUB_CACHE": "huggingface_hub loads models, pickles included, from this cache "
                    "(huggingface_hub's environment variables)",
    "HUGGINGFACE_HUB_CACHE": "the older name of HF_HUB_CACHE (huggingface_hub's environment "
                             "variables)",
    "TRANSFORMERS_CACHE": "transformers loads models, pickles included, from this cache "
                          "(transformers' installation docs)",
    "HF_MODULES_CACHE": "transformers imports trust_remote_code modules from this directory "
                        "(transformers' dynamic_module_utils)",
    "HF_DATASETS_CACHE": "datasets loads datasets, and their loading scripts, from this "
                         "cache (datasets' cache docs)",
    "TORCH_HOME": "torch.hub imports hubconf.py and loads checkpoints, pickles included, "
                  "from it (torch.hub docs)",
    "TORCH_EXTENSIONS_DIR": "torch.utils.cpp_extension.load imports the extension libraries "
                            "built in it (torch.utils.cpp_extension docs)",
    "TORCHINDUCTOR_CACHE_DIR": "torch.compile loads compiled kernels, Python modules and "
                               "libraries, from this cache (torch._inductor's config)",
    "TRITON_CACHE_DIR": "triton loads compiled kernels from this cache (triton's knobs)",
    "XDG_CACHE_HOME": "the Hugging Face, torch, pip and uv caches, which models and packages "
                      "are loaded from, default to it (XDG Base Directory specification)",
    "MPLCONFIGDIR": "matplotlib reads matplotlibrc from it, and imports the module its "
                    "backend: module://NAME names (matplotlib's customizing docs)",
    "MATPLOTLIBRC": "matplotlib reads this matplotlibrc (matplotlib's customizing docs)",
    "IPYTHONDIR": "IPython runs its profile's startup/*.py from it (IPython's config docs)",
    "JUPYTER_CONFIG_DIR": "Jupyter runs its configuration files, which are Python, from it "
                          "(Jupyter's common directories docs)",
}


@dataclass(frozen=True)
class EndpointVariables(VariableList):
    """The names that say where a program sends credentials or fetches code."""

    @classmethod
    def from_setting(cls, value: str) -> EndpointVariables:
        """The ``endpoint_variables`` setting, in the start-up hooks' grammar."""
        return cls(parse_setting(value, DEFAULT, "endpoint_variables"))


DEFAULT_ENDPOINTS = EndpointVariables(DEFAULT)


@dataclass(frozen=True)
class EndpointAllowance:
    """The platform lets one project's policy give ``name`` a value."""

    project: str
    name: str
    reason: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EndpointAllowance:
        return cls(data["project"], data["name"], data.get("reason") or "")

    def to_dict(self) -> dict[str, Any]:
        out = {"project": self.project, "name": self.name}
        return {**out, "reason": self.reason} if self.reason else out


FIELD = "endpoint_allowances"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A project's name, as shared.access.projects.NAME has it (policy sits below access; a
# test holds the two equal).
PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def allowance_problems(raw: Any) -> list[Problem]:
    """Every reason a policy's ``endpoint_allowances`` cannot be saved: each entry names one
    project and one exact variable name (never a family), at most once."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [Problem(rule="policy.endpoint_allowance", field=FIELD,
                        message=f"{FIELD} is a list of {{project, name, reason}}")]
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(raw):
        where = f"{FIELD}[{index}]"
        if not isinstance(entry, Mapping):
            problems.append(Problem(rule="policy.endpoint_allowance", field=where,
                                    message=f"{where} is an object {{project, name, reason}}"))
            continue
        project, name = entry.get("project"), entry.get("name")
        if not isinstance(project, str) or not PROJECT_NAME.fullmatch(project):
            problems.append(Problem(rule="policy.endpoint_allowance", field=f"{where}.project",
                                    message=f"{where}.project must be a project's name"))
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            problems.append(Problem(
                rule="policy.endpoint_allowance", field=f"{where}.name",
                variable=name if isinstance(name, str) else None,
                message=f"{where}.name must be one variable's exact name (no family): an "
                        "allowance lets a project set exactly the names it lists"))
        if not isinstance(entry.get("reason", ""), str):
            problems.append(Problem(rule="policy.endpoint_allowance", field=f"{where}.reason",
                                    message=f"{where}.reason must be text"))
        if isinstance(project, str) and isinstance(name, str):
            if (project, name) in seen:
                problems.append(Problem(
                    rule="policy.endpoint_allowance", variable=name, field=where,
                    message=f"{name} is allowed to project {project} twice"))
            seen.add((project, name))
    return problems


def endpoint_problems(data: Mapping[str, Any], endpoints: VariableList, project: str | None,
                      allowed: Collection[str] = (),
                      held: Collection[str] = ()) -> list[Problem]:
    """Every default, and every protected entry with a value, of ``project``'s draft policy
    that would give an endpoint variable a value the platform does not allow that project
    (``allowed``), each named with what it does.  ``held``: names a scope above protects,
    refused already as ``layer.platform_protected``."""
    problems: list[Problem] = []
    for field, name in valued_entries(data):
        why = endpoints.why(name)
        if why is None or name in allowed or name in held:
            continue
        whose = f"project {project}" if project else "a project"
        problems.append(Problem(
            rule="layer.endpoint_variable", variable=name, field=field,
            message=f"{name} says where a program sends its credentials or fetches code: "
                    f"{why}. Only the platform's policy may give it a value, unless the "
                    f"platform's endpoint_allowances allow it to {whose}: a value set here "
                    "would reach every member's task, with their tokens; a project may "
                    "protect it without a value"))
    return problems


def misplaced_allowances(data: Mapping[str, Any]) -> list[Problem]:
    """A project's policy cannot allow itself anything: allowances are the platform's."""
    if not data.get(FIELD):
        return []
    return [Problem(rule="layer.endpoint_allowance", field=FIELD,
                    message=f"{FIELD} belong in the platform's policy: only an admin may "
                            "allow a project an endpoint variable")]


def withheld_warning(name: str, scope: str, version: int, why: str) -> Problem:
    """A stored project policy version gives an endpoint variable a value the platform does
    not allow the project (it was saved before such versions were refused, or its
    allowance was withdrawn since): the task does not get the value, and is told why."""
    project = scope.removeprefix("project:")
    return Problem(rule="policy.endpoint_variable", variable=name,
                   message=f"{name} from project {project}'s policy v{version} was not set: "
                           f"it says where a program sends its credentials or fetches code "
                           f"({why}), and the platform's policy does not allow project "
                           f"{project} to set it")
