#!/bin/sh
# chaos-etcd entrypoint: etcd (its arguments are this script's) under this script, which stays the
# container's main process as a supervisor so a member can be stopped and started with the
# container (its network, ports and data on the tmpfs) kept up, as chaos-postgres does:
#   SIGUSR1  stop etcd (SIGTERM: it steps down and exits)
#   SIGUSR2  stop etcd hard (SIGKILL: a crash; the next start replays its WAL)
#   SIGHUP   start etcd again (nothing when it runs)
#   SIGINT/SIGTERM  stop etcd and exit (`docker stop`)
# If etcd exits on its own the container exits with its status, as when etcd is PID 1.
set -u
stops=0 crashes=0 starts=0 exits=0
seen_stops=0 seen_crashes=0 seen_starts=0
trap 'stops=$((stops + 1))' USR1
trap 'crashes=$((crashes + 1))' USR2
trap 'starts=$((starts + 1))' HUP
trap 'exits=$((exits + 1))' INT TERM
pid=
start_etcd() {
    /usr/bin/etcd "$@" &
    pid=$!
}
stop_etcd() { # signal, what
    kill -"$1" "$pid" 2>/dev/null
    # A trapped signal ends a wait early: wait until etcd is really gone.
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
    echo "chaos-etcd: etcd stopped ($2)" >&2
    pid=
}
start_etcd "$@"
while :; do
    if [ "$exits" != 0 ]; then
        [ -n "$pid" ] && stop_etcd TERM "container stop"
        exit 0
    fi
    if [ "$stops" != "$seen_stops" ] || [ "$crashes" != "$seen_crashes" ]; then
        if [ "$crashes" != "$seen_crashes" ]; then sig=KILL what=crash; else sig=TERM what=stop; fi
        seen_stops=$stops seen_crashes=$crashes
        [ -n "$pid" ] && stop_etcd "$sig" "$what"
        continue
    fi
    if [ "$starts" != "$seen_starts" ]; then
        seen_starts=$starts
        [ -z "$pid" ] && start_etcd "$@"
        continue
    fi
    if [ -n "$pid" ]; then
        # Returns when etcd exits, or early when a trapped signal arrives.
        wait "$pid"
        status=$?
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "chaos-etcd: etcd exited on its own (status $status)" >&2
            exit "$status"
        fi
    else
        sleep 1 &
        wait $!
    fi
done
