#!/bin/sh
# A payer written apart from the reference payer: POSIX sh and psql, one process per
# statement, its own pace. It follows docs/designs.md ("The payout") and nothing else, so the
# harness's tests run a payout that is not ours. It elects itself through the lease (the
# claim row), and pays the month's plan to the processor shard, skipping whoever its own
# record says is paid.
#
#   chaos run payout --election lease --mover-cmd 'workloads/examples/psql-payer.sh' --mover-ready gate
#
# Its own switch (environment):
#   PSQL_PAYER_IDEMPOTENT=on|off   send each payment with an idempotency key (default off)
set -u

job=$CHAOS_JOB
me=$CHAOS_BOX
lease_ms=$CHAOS_LEASE_MS
poll_ms=$CHAOS_POLL_MS
pay_ms=$CHAOS_COPY_MS
idempotent=${PSQL_PAYER_IDEMPOTENT:-off}
export PGAPPNAME="$me" PGCONNECT_TIMEOUT=5 PGGSSENCMODE=disable PGSSLMODE=disable
routing=$CHAOS_ROUTING_URL

say() { printf '{"type":"%s","f":"%s","value":%s}\n' "$1" "$2" "$3"; }
sleep_ms() { sleep "$(awk "BEGIN { printf \"%.3f\", $1 / 1000 }")"; }
q() { url=$1; shift; psql "$url" -X -q -t -A -v ON_ERROR_STOP=1 "$@"; }
shard_url() { printf '%s\n' "$CHAOS_SHARD_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"; }

# Connected: say so through the gate (--mover-ready gate), so the clock starts now.
until q "$routing" -c "select 1" >/dev/null 2>&1; do sleep_ms 100; done
[ -n "${CHAOS_GATE:-}" ] && read -r _ < "$CHAOS_GATE"

while :; do
  # Take the claim: a token, or nothing while somebody else holds it.
  token=$(q "$routing" -c "select claim_acquire('$job', '$me', $lease_ms)" 2>/dev/null)
  if [ -z "$token" ]; then sleep_ms "$poll_ms"; continue; fi
  say ok acquire "{\"token\":$token}"
  lost=no
  # The plan, one publisher a line: publisher|month|amount|processor.
  for row in $(q "$routing" -F '|' -c "select publisher, month, amount_cents, processor from payout_plan order by position"); do
    publisher=${row%%|*}; rest=${row#*|}
    month=${rest%%|*}; rest=${rest#*|}
    amount=${rest%%|*}; processor=${rest#*|}
    paid=$(q "$routing" -c "select count(*) from payout_progress where publisher = '$publisher' and month = '$month'")
    [ "$paid" = 1 ] && continue
    key=null
    [ "$idempotent" = on ] && key="'$month/$publisher'"
    say invoke pay "{\"publisher\":\"$publisher\",\"token\":$token}"
    if ! q "$(shard_url "$processor")" -c "insert into payouts (publisher, month, amount_cents, idempotency_key, token) values ('$publisher', '$month', $amount, $key, $token) on conflict (idempotency_key) do nothing" >/dev/null; then
      say info pay "{\"publisher\":\"$publisher\"}"
      exit 1
    fi
    say ok pay "{\"publisher\":\"$publisher\"}"
    sleep_ms "$pay_ms"
    q "$routing" -c "insert into payout_progress (publisher, month, paid_by, token) values ('$publisher', '$month', '$me', $token) on conflict do nothing" >/dev/null || exit 1
    renewed=$(q "$routing" -c "select claim_renew('$job', '$me', $token, $lease_ms)" 2>/dev/null)
    if [ "$renewed" != t ]; then
      say fail renew "{\"token\":$token,\"reason\":\"lost\"}"
      lost=yes
      break
    fi
  done
  if [ "$lost" = no ]; then
    q "$routing" -c "select claim_release('$job', '$me', $token)" >/dev/null 2>&1
    say ok done "{\"token\":$token}"
    exit 0
  fi
done
