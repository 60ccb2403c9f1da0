#!/bin/sh
# chaos-redis entrypoint: redis-server (its arguments are this script's) under this script, which stays the
# container's main process as a supervisor so the server can be stopped and started with the
# container (its network and ports) kept up, as chaos-etcd does:
#   SIGUSR1  stop redis-server (SIGTERM: it exits; without persistence it forgets the lock)
#   SIGUSR2  stop redis-server hard (SIGKILL: a crash)
#   SIGHUP   start redis-server again (nothing when it runs), with the arguments in
#            /var/lib/chaos-redis/role after its own when the harness wrote one (a member that
#            comes back as the replica of the one promoted meanwhile: `--replicaof HOST PORT`)
#   SIGINT/SIGTERM  stop redis-server and exit (`docker stop`)
# If redis-server exits on its own the container exits with its status.
set -u
stops=0 crashes=0 starts=0 exits=0
seen_stops=0 seen_crashes=0 seen_starts=0
trap 'stops=$((stops + 1))' USR1
trap 'crashes=$((crashes + 1))' USR2
trap 'starts=$((starts + 1))' HUP
trap 'exits=$((exits + 1))' INT TERM
pid=
start_redis() {
    # shellcheck disable=SC2046 # the role file's words are arguments
    /usr/bin/redis-server "$@" $(cat /var/lib/chaos-redis/role 2>/dev/null) &
    pid=$!
}
stop_redis() { # signal, what
    kill -"$1" "$pid" 2>/dev/null
    # A trapped signal ends a wait early: wait until redis-server is really gone.
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
    echo "chaos-redis: redis-server stopped ($2)" >&2
    pid=
}
start_redis "$@"
while :; do
    if [ "$exits" != 0 ]; then
        [ -n "$pid" ] && stop_redis TERM "container stop"
        exit 0
    fi
    if [ "$stops" != "$seen_stops" ] || [ "$crashes" != "$seen_crashes" ]; then
        if [ "$crashes" != "$seen_crashes" ]; then sig=KILL what=crash; else sig=TERM what=stop; fi
        seen_stops=$stops seen_crashes=$crashes
        [ -n "$pid" ] && stop_redis "$sig" "$what"
        continue
    fi
    if [ "$starts" != "$seen_starts" ]; then
        seen_starts=$starts
        [ -z "$pid" ] && start_redis "$@"
        continue
    fi
    if [ -n "$pid" ]; then
        # Returns when redis-server exits, or early when a trapped signal arrives.
        wait "$pid"
        status=$?
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "chaos-redis: redis-server exited on its own (status $status)" >&2
            exit "$status"
        fi
    else
        sleep 1 &
        wait $!
    fi
done
