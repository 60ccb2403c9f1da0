#!/bin/sh
# A watcher for the failover system that is not ours: POSIX sh, psql and curl, written from
# docs/watcher-protocol.md alone (the harness's tests run it: harness/tests/foreign_watcher.rs).
#
#   chaos run failover-github --watcher-cmd 'sh workloads/examples/sh-watcher.sh'
#   chaos run failover-github --watcher-cmd 'FENCE=on sh workloads/examples/sh-watcher.sh'
#
# It checks the primary every CHAOS_CHECK_MS with a one-row query, each bounded by
# CHAOS_CHECK_TIMEOUT_MS; after CHAOS_SILENCE_MS without an answer it promotes the replica
# and repoints the service record. With FENCE=on it first disables the proxies through which
# clients reach the primary, gives the replica two checks to replay what it received, then
# disables every other proxy to the primary. It prints history lines (optional by the
# protocol) and exits 0 once it has failed over.
set -u

: "${CHAOS_PRIMARY_URL:?}" "${CHAOS_REPLICA_URL:?}" "${CHAOS_CHECK_MS:?}" "${CHAOS_SILENCE_MS:?}"
: "${CHAOS_PROXY_API:?}" "${CHAOS_SERVICE_PROXY:?}" "${CHAOS_REPLICA_UPSTREAM:?}"
: "${CHAOS_PRIMARY_CLIENT_PROXIES:?}" "${CHAOS_PRIMARY_PROXIES:?}"
PGAPPNAME="${CHAOS_BOX:-watcher}"
export PGAPPNAME
check_timeout_ms="${CHAOS_CHECK_TIMEOUT_MS:-$CHAOS_CHECK_MS}"

now_ms() { date +%s%3N; }
seconds() { awk -v ms="$1" 'BEGIN { printf "%.3f", ms / 1000 }'; }
emit() { printf '{"type":"%s","f":"%s","value":%s}\n' "$1" "$2" "$3"; }
sql() { # url, statement, timeout in ms: the first field of the answer
    timeout "$(seconds "$3")" psql "$1" -X -A -t -q -c "$2" 2>/dev/null
}
proxy() { # name, JSON change
    curl -fsS -m 5 -X POST -H 'Content-Type: application/json' \
        "$CHAOS_PROXY_API/proxies/$1" -d "$2" >/dev/null
}
disable() { # comma-separated proxy names
    for p in $(echo "$1" | tr ',' ' '); do
        proxy "$p" '{"enabled": false}' || { echo "watcher: cannot disable $p" >&2; exit 1; }
    done
}

# Connected: the replica answers (with --watcher-ready gate, say so through the gate).
until [ "$(sql "$CHAOS_REPLICA_URL" 'select 1' 2000)" = 1 ]; do sleep 0.05; done
if [ -n "${CHAOS_GATE:-}" ]; then read -r _ < "$CHAOS_GATE"; fi

check_s=$(seconds "$CHAOS_CHECK_MS")
last_answer=$(now_ms)
while :; do
    began=$(now_ms)
    if [ "$(sql "$CHAOS_PRIMARY_URL" 'select 1' "$check_timeout_ms")" = 1 ]; then
        last_answer=$(now_ms)
        emit ok check "{\"node\":\"primary\",\"latency_ms\":$((last_answer - began))}"
    else
        emit fail check "{\"node\":\"primary\",\"reason\":\"no answer\",\"latency_ms\":$(($(now_ms) - began))}"
        silent=$(($(now_ms) - last_answer))
        if [ "$silent" -ge "$CHAOS_SILENCE_MS" ]; then
            emit info silence "{\"node\":\"primary\",\"silent_ms\":$silent}"
            break
        fi
    fi
    sleep "$check_s"
done

if [ "${FENCE:-off}" = on ]; then
    disable "$CHAOS_PRIMARY_CLIENT_PROXIES"
    emit ok fence '{"node":"primary","stage":"clients"}'
    sleep "$(seconds $((2 * CHAOS_CHECK_MS)))"
    rest=""
    for p in $(echo "$CHAOS_PRIMARY_PROXIES" | tr ',' ' '); do
        case ",$CHAOS_PRIMARY_CLIENT_PROXIES," in *",$p,"*) ;; *) rest="$rest,$p" ;; esac
    done
    disable "${rest#,}"
    emit ok fence '{"node":"primary","stage":"all"}'
fi

emit invoke promote '{"node":"replica"}'
if [ "$(sql "$CHAOS_REPLICA_URL" 'select pg_promote(true, 60)' 90000)" != t ]; then
    emit fail promote '{"node":"replica"}'
    exit 1
fi
emit ok promote '{"node":"replica"}'
proxy "$CHAOS_SERVICE_PROXY" "{\"upstream\":\"$CHAOS_REPLICA_UPSTREAM\",\"enabled\":true}" || exit 1
emit ok repoint "{\"proxy\":\"$CHAOS_SERVICE_PROXY\",\"node\":\"replica\"}"
exit 0
