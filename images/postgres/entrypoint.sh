#!/bin/sh
# chaos-postgres entrypoint: initdb on first start (trust auth, user postgres), then exec postgres
# as user postgres so that it is the container's main process (docker stop/kill reach it directly).
# Extra arguments (e.g. -c fsync=off) are passed to postgres, as with the official postgres image.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    initdb -D "$PGDATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >/dev/null
    echo "host all all 0.0.0.0/0 trust" >> "$PGDATA/pg_hba.conf"
    echo "host all all ::/0 trust" >> "$PGDATA/pg_hba.conf"
fi
# The image build runs initdb once through this script.
[ "${1:-}" = --init-only ] && exit 0
exec postgres -D "$PGDATA" -c listen_addresses='*' -c port=5432 "$@"
