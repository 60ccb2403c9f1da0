#!/bin/sh
# chaos-postgres entrypoint: on first start a data directory (a copy of the template the image
# build initdb'd: trust auth, user postgres; initdb when there is none), then postgres as
# user postgres under this script, which stays the container's main process as a supervisor so a
# database can be stopped and started with the container (its network, ports and data) kept up:
#   SIGUSR1  stop postgres, fast mode (a maintenance stop: roll back, checkpoint, exit)
#   SIGUSR2  stop postgres, immediate mode (a crash: the next start runs recovery)
#   SIGHUP   start postgres again (nothing when it runs)
#   SIGINT/SIGTERM  stop postgres fast and exit (`docker stop`)
# A stop or crash signal may also be sent to postgres itself right after USR1/USR2 (the harness
# does, from the host, so the stop lands at its signal rather than at this shell's relay).
# Restarting a stopped container took about a second on our engine; these take what postgres
# itself takes. The harness finds the signals in the image's label chaos.postgres.signals.
# If postgres exits on its own the container exits with its status, as when postgres is PID 1.
# Extra arguments (e.g. -c fsync=off) are passed to postgres, as with the official postgres image.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
template=/var/lib/postgresql/template
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ "$PGDATA" != "$template" ] && [ -s "$template/PG_VERSION" ]; then
        # The image's build ran initdb once into the template: copying it takes 0.05 s.
        cp -a "$template/." "$PGDATA/"
    else
        initdb -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
        echo "host all all 0.0.0.0/0 trust" >> "$PGDATA/pg_hba.conf"
        echo "host all all ::/0 trust" >> "$PGDATA/pg_hba.conf"
    fi
fi
# The image build runs initdb once through this script.
[ "${1:-}" = --init-only ] && exit 0
set +e
# The traps only count signals; the loop below acts on them in order (exit, stop, start), so a
# start that arrives while postgres is still shutting down is kept and done after it.
stops=0 crashes=0 starts=0 exits=0
seen_stops=0 seen_crashes=0 seen_starts=0
trap 'stops=$((stops + 1))' USR1
trap 'crashes=$((crashes + 1))' USR2
trap 'starts=$((starts + 1))' HUP
trap 'exits=$((exits + 1))' INT TERM
pg=
# CHAOS_LD_PRELOAD (libfaketime for a clock fault) preloads postgres alone: preloaded into this
# script as root, libfaketime's shared semaphore would be root's, and postgres could not open it.
start_pg() {
    LD_PRELOAD="${CHAOS_LD_PRELOAD:-}" postgres -D "$PGDATA" -c listen_addresses='*' -c port=5432 "$@" &
    pg=$!
}
stop_pg() { # signal, what
    kill -"$1" "$pg" 2>/dev/null
    # A trapped signal ends a wait early: wait until postgres is really gone.
    while kill -0 "$pg" 2>/dev/null; do wait "$pg"; done
    echo "chaos-postgres: postgres stopped ($2)" >&2
    pg=
}
start_pg "$@"
while :; do
    if [ "$exits" != 0 ]; then
        [ -n "$pg" ] && stop_pg INT "container stop"
        exit 0
    fi
    if [ "$stops" != "$seen_stops" ] || [ "$crashes" != "$seen_crashes" ]; then
        if [ "$crashes" != "$seen_crashes" ]; then sig=QUIT what=immediate; else sig=INT what=fast; fi
        seen_stops=$stops seen_crashes=$crashes
        [ -n "$pg" ] && stop_pg "$sig" "$what"
        continue
    fi
    if [ "$starts" != "$seen_starts" ]; then
        seen_starts=$starts
        [ -z "$pg" ] && start_pg "$@"
        continue
    fi
    if [ -n "$pg" ]; then
        # Returns when postgres exits, or early when a trapped signal arrives.
        wait "$pg"
        status=$?
        if ! kill -0 "$pg" 2>/dev/null; then
            # A stop or crash the harness also sent postgres itself (label chaos.postgres.direct):
            # its USR1/USR2 came first and is counted by now, so this is the stop, not an exit.
            if [ "$stops" != "$seen_stops" ] || [ "$crashes" != "$seen_crashes" ]; then
                continue
            fi
            echo "chaos-postgres: postgres exited on its own (status $status)" >&2
            exit "$status"
        fi
    else
        # Short, so a signal counted just before this wait is acted on within a second
        # (the harness also repeats its signal until it sees the effect).
        sleep 1 &
        wait $!
    fi
done
