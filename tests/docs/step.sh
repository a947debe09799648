# One statement of a document, run as a reader's shell runs it (tests/docs/runner.py):
#
#   bash --noprofile --norc step.sh STATE FILE
#
# sources STATE (what the statements before it left: variables, exported or not,
# functions, the current directory), then FILE (the statement, as written), and writes
# the state back to STATE for the next one, whatever way the statement ends.  Its exit
# status is the statement's.  No `set -e`: a pasted command that fails does not stop
# the shell; pipefail is on, so a pipeline fails when any part of it does.
__doc_state=$1
__doc_file=$2
source "$__doc_state"

__doc_save() {
    local __doc_status=$? __doc_name __doc_line __doc_attrs
    {
        for __doc_name in $(compgen -v); do
            case $__doc_name in
                __doc_* | BASH* | COMP_* | FUNCNAME | GROUPS | DIRSTACK | PIPESTATUS | LINENO | \
                RANDOM | SRANDOM | SECONDS | EPOCH* | HISTCMD | OLDPWD | PWD | SHLVL | _) continue ;;
            esac
            __doc_line=$(declare -p "$__doc_name" 2>/dev/null) || continue
            read -r _ __doc_attrs _ <<<"$__doc_line"
            [[ $__doc_attrs == -*r* ]] && continue # readonly: bash's own (UID, PPID, ...)
            printf '%s\n' "$__doc_line"
        done
        for __doc_name in $(compgen -A function); do
            [[ $__doc_name == __doc_* ]] || declare -f "$__doc_name"
        done
        printf 'cd -- %q\n' "$PWD"
    } >"$__doc_state.new" && mv -f "$__doc_state.new" "$__doc_state"
    exit "$__doc_status"
}
trap __doc_save EXIT

set -o pipefail
source "$__doc_file"
