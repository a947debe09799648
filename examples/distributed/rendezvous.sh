#!/bin/sh
# The rendezvous of a distributed task with nothing but a POSIX shell and busybox nc:
# replica 0 listens on MASTER_ADDR:MASTER_PORT and adds up the RANK each other replica
# sends; every replica checks WORLD_SIZE against TASK_REPLICAS.  Every value comes from
# the variables the platform sets per replica; nothing is passed on the command line.
set -eu
[ "$WORLD_SIZE" = "$TASK_REPLICAS" ] || { echo "WORLD_SIZE $WORLD_SIZE != $TASK_REPLICAS"; exit 2; }
if [ "$RANK" = 0 ]; then
    sum=0
    i=1
    while [ "$i" -lt "$WORLD_SIZE" ]; do
        got=$(nc -l -p "$MASTER_PORT")
        sum=$((sum + got))
        i=$((i + 1))
    done
    want=$((WORLD_SIZE * (WORLD_SIZE - 1) / 2))
    [ "$sum" = "$want" ] || { echo "rank 0: sum $sum, want $want"; exit 3; }
    echo "rank 0: all $WORLD_SIZE replicas met at $MASTER_ADDR:$MASTER_PORT (sum of ranks $sum)"
else
    tries=0
    until echo "$RANK" | nc "$MASTER_ADDR" "$MASTER_PORT" 2>/dev/null; do
        tries=$((tries + 1))
        [ "$tries" -lt 300 ] || { echo "rank $RANK: no master at $MASTER_ADDR:$MASTER_PORT"; exit 4; }
        sleep 0.1
    done
    echo "rank $RANK of $WORLD_SIZE: sent to $MASTER_ADDR:$MASTER_PORT"
fi
