#!/bin/sh
# chaos-zookeeper entrypoint: ZooKeeper's JVM (java with this script's arguments; the harness names
# QuorumPeerMain and the config) under this script, which stays the container's main process as a
# supervisor so the server can be stopped and started with the container (its network and ports)
# kept up, as chaos-etcd and chaos-redis do. $ZOO_CFG, when set, is written to
# /var/lib/chaos-zookeeper/zoo.cfg and $ZOO_MYID to its data directory's myid first.
#   SIGUSR1  stop the JVM (SIGTERM)
#   SIGUSR2  stop the JVM hard (SIGKILL: a crash)
#   SIGHUP   start the JVM again on its data (nothing when it runs)
#   SIGINT/SIGTERM  stop the JVM and exit (`docker stop`)
# If the JVM exits on its own the container exits with its status.
set -u
dir=/var/lib/chaos-zookeeper
mkdir -p "$dir/data"
[ -n "${ZOO_CFG:-}" ] && printf '%s\n' "$ZOO_CFG" > "$dir/zoo.cfg"
[ -n "${ZOO_MYID:-}" ] && printf '%s\n' "$ZOO_MYID" > "$dir/data/myid"
# $ZOO_FORWARD, an ensemble's member: `PORT:HOST:PORT ...`, each a forwarder on 127.0.0.1:PORT
# to HOST:PORT (another member's election port, through the proxy). A member that opens an
# election connection to one with a higher id announces its own address (127.0.0.1 here), and
# that member calls back there: in its own container, the forwarder takes the call to the link.
for f in ${ZOO_FORWARD:-}; do
    socat "TCP-LISTEN:${f%%:*},bind=127.0.0.1,fork,reuseaddr" "TCP:${f#*:}" &
done
stops=0 crashes=0 starts=0 exits=0
seen_stops=0 seen_crashes=0 seen_starts=0
trap 'stops=$((stops + 1))' USR1
trap 'crashes=$((crashes + 1))' USR2
trap 'starts=$((starts + 1))' HUP
trap 'exits=$((exits + 1))' INT TERM
pid=
start_zk() {
    /usr/bin/java "$@" &
    pid=$!
}
stop_zk() { # signal, what
    kill -"$1" "$pid" 2>/dev/null
    # A trapped signal ends a wait early: wait until the JVM is really gone.
    while kill -0 "$pid" 2>/dev/null; do wait "$pid"; done
    echo "chaos-zookeeper: zookeeper stopped ($2)" >&2
    pid=
}
start_zk "$@"
while :; do
    if [ "$exits" != 0 ]; then
        [ -n "$pid" ] && stop_zk TERM "container stop"
        exit 0
    fi
    if [ "$stops" != "$seen_stops" ] || [ "$crashes" != "$seen_crashes" ]; then
        if [ "$crashes" != "$seen_crashes" ]; then sig=KILL what=crash; else sig=TERM what=stop; fi
        seen_stops=$stops seen_crashes=$crashes
        [ -n "$pid" ] && stop_zk "$sig" "$what"
        continue
    fi
    if [ "$starts" != "$seen_starts" ]; then
        seen_starts=$starts
        [ -z "$pid" ] && start_zk "$@"
        continue
    fi
    if [ -n "$pid" ]; then
        # Returns when the JVM exits, or early when a trapped signal arrives.
        wait "$pid"
        status=$?
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "chaos-zookeeper: zookeeper exited on its own (status $status)" >&2
            exit "$status"
        fi
    else
        sleep 1 &
        wait $!
    fi
done
