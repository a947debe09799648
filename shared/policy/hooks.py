"""Start-up hook variables: names whose value decides what a program loads or runs.

Whoever sets ``BASH_ENV`` (or ``LD_PRELOAD``, ``PYTHONWARNINGS`` with ``BROWSER``, ...)
for someone else's task runs code in it, with the task's secrets in its environment.
Only the platform's policy may give such a name a value: the platform's admins already
hold every task.  A project's maintainer may still *protect* one without a value (so
members cannot set it), and a user may set one in their own task: that is their own code.

The list is a platform setting, ``TASKENV_STARTUP_HOOKS``: comma-separated names, ``*``
families (``LD_*``), the word ``default`` for the list below, and ``-NAME`` to take one
entry of that list out.  Each default entry says what it does and where that is
documented, so an operator can judge what a removal gives away.  The parsing is shared
with the other such list, the endpoint variables (``shared.policy.endpoints``: where a
program sends credentials or fetches code), which travels with this one as ``endpoints``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import Problem
from shared.policy.endpoints import DEFAULT_ENDPOINTS, EndpointVariables
from shared.policy.namelist import VariableList, parse_setting, valued_entries

# pattern -> what setting it does (the documentation that says so).
DEFAULT: dict[str, str] = {
    # The dynamic loader, ld.so(8): preloads, audit modules, library search paths.
    "LD_*": "the dynamic loader's LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH and kin choose "
            "libraries every program loads (ld.so(8))",
    "GLIBC_TUNABLES": "tunes glibc's loader and allocator in every program (ld.so(8); "
                      "its parser was CVE-2023-4911)",
    "GCONV_PATH": "glibc loads character-set converter modules from it (iconv(3))",
    "LOCPATH": "glibc reads locale data from it (setlocale(3))",
    # Shells, bash(1) and POSIX sh.
    "BASH_ENV": "bash runs this file before any non-interactive script (bash(1))",
    "ENV": "sh and bash in POSIX mode run this file at interactive start (bash(1), dash(1))",
    "BASH_FUNC_*": "bash imports exported functions from these at start (bash(1))",
    "SHELLOPTS": "bash starts with these options, xtrace among them (bash(1))",
    "BASHOPTS": "bash starts with these shopt options (bash(1))",
    "PS4": "bash expands it, command substitutions included, before each traced command "
           "(bash(1))",
    "PS0": "bash expands it, command substitutions included, before each command "
           "(bash(1))",
    "PROMPT_COMMAND": "bash runs it before each prompt (bash(1))",
    "ZDOTDIR": "zsh reads its start-up files from it (zsh(1))",
    # Python, the Python documentation's "Command line and environment".
    "PYTHONSTARTUP": "Python runs this file at interactive start (python(1))",
    "PYTHONPATH": "Python imports modules from it first (python(1))",
    "PYTHONHOME": "Python loads its standard library from it (python(1))",
    "PYTHONWARNINGS": "a warnings filter imports the module its category names (warnings, "
                      "'Describing warning filters')",
    "PYTHONBREAKPOINT": "breakpoint() imports and calls the callable it names (python(1))",
    "PYTHONINSPECT": "Python drops into an interactive prompt after the script (python(1))",
    "PYTHONUSERBASE": "site adds its site-packages, and runs its .pth files (site)",
    "PYTHONPLATLIBDIR": "Python loads platform modules from it (python(1))",
    "PYTHONPYCACHEPREFIX": "Python reads compiled bytecode from it (python(1))",
    "PYTHONEXECUTABLE": "sets sys.executable, which subprocesses run (python(1))",
    "BROWSER": "webbrowser runs the commands it lists (webbrowser; reachable from a "
               "PYTHONWARNINGS category)",
    # Other interpreters and runtimes.
    "NODE_OPTIONS": "node takes --require and --import from it (Node.js CLI docs)",
    "NODE_PATH": "node resolves modules from it (Node.js modules docs)",
    "PERL5OPT": "perl takes -M and -I switches from it (perlrun)",
    "PERL5LIB": "perl loads modules from it first (perlrun)",
    "PERLLIB": "perl loads modules from it first (perlrun)",
    "PERL5DB": "perl -d runs it as the debugger (perlrun)",
    "RUBYOPT": "ruby takes -r switches from it (ruby(1))",
    "RUBYLIB": "ruby loads libraries from it first (ruby(1))",
    "JAVA_TOOL_OPTIONS": "every JVM takes -javaagent and other options from it (JVM TI)",
    "JDK_JAVA_OPTIONS": "the java launcher takes options from it (java(1))",
    "_JAVA_OPTIONS": "HotSpot JVMs take options from it (java(1))",
    "LUA_INIT": "lua runs it, or the file it names, at start (lua(1))",
    "R_PROFILE": "R runs this file at start (R's ?Startup)",
    "R_PROFILE_USER": "R runs this file at start (R's ?Startup)",
    # Plugins and injection paths of the training stack.
    "NCCL_NET_PLUGIN": "NCCL loads the network plugin library it names (NCCL env docs)",
    "NCCL_TUNER_PLUGIN": "NCCL loads the tuner plugin library it names (NCCL env docs)",
    "NCCL_PROFILER_PLUGIN": "NCCL loads the profiler plugin library it names "
                            "(NCCL env docs)",
    "CUDA_INJECTION64_PATH": "the CUDA driver loads this library into the process at "
                             "initialisation (CUPTI / Nsight injection)",
    "CUDA_INJECTION32_PATH": "the CUDA driver loads this library into a 32-bit process (CUPTI)",
    "NVTX_INJECTION64_PATH": "NVTX loads this library as its tool (NVTX docs)",
    "OPENSSL_CONF": "OpenSSL reads this configuration, which can load engines and "
                    "providers (config(5ssl))",
    "OPENSSL_MODULES": "OpenSSL loads providers from it (openssl-env(7))",
    "OPENSSL_ENGINES": "OpenSSL loads engines from it (openssl-env(7))",
    # Git, git(1) and git-config(1).
    "GIT_CONFIG_*": "git reads configuration (core.sshCommand, hooks paths, aliases) from "
                    "GIT_CONFIG_COUNT/KEY_n/VALUE_n, GIT_CONFIG_GLOBAL/SYSTEM/PARAMETERS "
                    "(git-config(1))",
    "GIT_SSH": "git runs it to reach a remote (git(1))",
    "GIT_SSH_COMMAND": "git runs it to reach a remote (git(1))",
    "GIT_ASKPASS": "git runs it to ask for a password (git(1))",
    "GIT_EXEC_PATH": "git runs its sub-commands from it (git(1))",
    "GIT_PROXY_COMMAND": "git runs it to connect (git-config(1) core.gitProxy)",
    "GIT_EXTERNAL_DIFF": "git runs it for diffs (git(1))",
    # Package installers: what code a step installs.
    "PIP_INDEX_URL": "pip installs packages from it (pip's configuration docs)",
    "PIP_EXTRA_INDEX_URL": "pip installs packages from it too (pip's configuration docs)",
    "PIP_CONFIG_FILE": "pip reads its configuration from it (pip's configuration docs)",
    # Trust stores: whom a program believes it is talking to.
    "SSL_CERT_FILE": "OpenSSL trusts the certificates in this file (openssl-env(7))",
    "SSL_CERT_DIR": "OpenSSL trusts the certificates in this directory (openssl-env(7))",
    "REQUESTS_CA_BUNDLE": "requests trusts the certificates in this file (requests' "
                          "advanced usage docs)",
    "CURL_CA_BUNDLE": "curl and requests trust the certificates in this file (curl(1))",
    "NODE_EXTRA_CA_CERTS": "node trusts these certificates too (Node.js CLI docs)",
    "PIP_CERT": "pip trusts the certificates in this file (pip's configuration docs)",
    "GIT_SSL_CAINFO": "git trusts the certificates in this file (git-config(1) http.sslCAInfo)",
}


@dataclass(frozen=True)
class StartupHooks(VariableList):
    """The names only the platform's policy may give a value: exact names and ``*``
    families, each with what it does (shown in refusals and warnings).  ``endpoints``:
    the endpoint variables, the other list of such names, which the platform may allow
    one project (``shared.policy.endpoints``); it travels with this one to every place
    that checks or resolves a project's policy."""

    endpoints: EndpointVariables = DEFAULT_ENDPOINTS

    @classmethod
    def from_setting(cls, value: str, endpoints: str = "default") -> StartupHooks:
        """``default``, names, ``FAMILY*`` and ``-NAME`` (one default entry out), comma
        separated; an empty setting is the default list, so it is never off by accident.
        ``endpoints``: the endpoint variables' setting, in the same grammar."""
        return cls(parse_setting(value, DEFAULT, "startup_hooks"),
                   EndpointVariables.from_setting(endpoints))


DEFAULT_HOOKS = StartupHooks(DEFAULT)


def injection_problems(data: Mapping[str, Any], hooks: StartupHooks) -> list[Problem]:
    """Every default, and every protected entry with a value, of a project policy that
    would give a start-up hook variable a value, each named with what it does."""
    problems: list[Problem] = []
    for field, name in valued_entries(data):  # a reservation only stops members setting it
        why = hooks.why(name)
        if why is not None:
            problems.append(Problem(
                rule="layer.startup_hook", variable=name, field=field,
                message=f"{name} decides what a program loads or runs at start: {why}. "
                        "Only the platform's policy may give it a value, since a value "
                        "set here would run in every member's task with their secrets; "
                        "a project may protect it without a value"))
    return problems


def withheld_warning(name: str, scope: str, version: int, why: str) -> Problem:
    """A stored project policy version injects a start-up hook (it was saved before such
    versions were refused): the task does not get the value, and is told why."""
    project = scope.removeprefix("project:")
    return Problem(rule="policy.startup_hook", variable=name,
                   message=f"{name} from project {project}'s policy v{version} was not "
                           f"set: it decides what a program loads or runs at start ({why}), "
                           "and only the platform's policy may give it a value")
