#!/bin/sh
# The rendezvous of a distributed task with nothing but a POSIX shell and busybox nc:
# replica 0 listens on MASTER_ADDR:MASTER_PORT and adds up the RANK each other replica
# sends; every replica checks WORLD_SIZE against TASK_REPLICAS.  Every value comes from
# the variables the platform sets per replica; nothing is passed on the command line.
#
# Each side runs its half of the exchange as nc's -e program, on the connection itself:
# replica 0 answers "ok" only once it has read a rank, and a sender retries until it has
# that answer.  Piping into nc is not enough: busybox nc exits when its input ends, so a
# listener fed by `echo` can close before the sender's rank arrives, and a sender whose
# connection the kernel queued and then dropped still exits 0.  A sender that retries
# after its rank was read is counted once.
set -eu
[ "$WORLD_SIZE" = "$TASK_REPLICAS" ] || { echo "WORLD_SIZE $WORLD_SIZE != $TASK_REPLICAS"; exit 2; }
if [ "$RANK" = 0 ]; then
    seen=" " count=0 sum=0
    while [ "$count" -lt $((WORLD_SIZE - 1)) ]; do
        got=$(nc -l -p "$MASTER_PORT" -e sh -c 'read -r r && echo "$r" >&2 && echo ok' \
              2>&1 >/dev/null) || true
        case "$got" in ''|*[!0-9]*) continue ;; esac      # nothing read
        case "$seen" in *" $got "*) continue ;; esac      # a sender that retried
        seen="$seen$got " count=$((count + 1)) sum=$((sum + got))
    done
    want=$((WORLD_SIZE * (WORLD_SIZE - 1) / 2))
    [ "$sum" = "$want" ] || { echo "rank 0: sum $sum, want $want"; exit 3; }
    echo "rank 0: all $WORLD_SIZE replicas met at $MASTER_ADDR:$MASTER_PORT (sum of ranks $sum)"
else
    tries=0
    until nc "$MASTER_ADDR" "$MASTER_PORT" -e sh -c 'echo "$RANK"; read -r a; [ "$a" = ok ]' \
          2>/dev/null; do
        tries=$((tries + 1))
        [ "$tries" -lt 300 ] || { echo "rank $RANK: no master at $MASTER_ADDR:$MASTER_PORT"; exit 4; }
        sleep 0.1
    done
    echo "rank $RANK of $WORLD_SIZE: sent to $MASTER_ADDR:$MASTER_PORT"
fi
