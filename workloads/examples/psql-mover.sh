#!/bin/sh
# A mover written apart from the reference mover: POSIX sh and psql, one process per
# statement, its own pace and its own retry habits. It follows docs/mover-protocol.md and
# nothing else, so the harness's tests run a mover that is not ours.
#
#   chaos run april --mover-cmd 'workloads/examples/psql-mover.sh'
#
# Its own switches (environment):
#   PSQL_MOVER_FENCING=on|off   fence every plan shard when it takes the claim, and begin every
#                               shard write with the fence statement (default off)
#   PSQL_MOVER_PACE=1.0         a turbine takes PACE x CHAOS_COPY_MS: it copies at once, then
#                               waits out the rest (the reference mover spreads batches instead)
#   PSQL_MOVER_RETRIES=3        renewals tried before it gives up (each after CHAOS_POLL_MS)
set -u

job=$CHAOS_JOB
me=$CHAOS_BOX
lease_ms=$CHAOS_LEASE_MS
poll_ms=$CHAOS_POLL_MS
copy_ms=$CHAOS_COPY_MS
fencing=${PSQL_MOVER_FENCING:-off}
pace=${PSQL_MOVER_PACE:-1.0}
retries=${PSQL_MOVER_RETRIES:-3}
# libpq names every connection after the box: the shards' audit attributes writes by it.
export PGAPPNAME="$me" PGCONNECT_TIMEOUT=5
# One connection per statement: skip the GSSAPI and TLS negotiations the proxied servers
# would refuse anyway (each costs a round trip or a Kerberos lookup).
export PGGSSENCMODE=disable PGSSLMODE=disable

# One history line on stdout (optional in the protocol; the story and the report use them).
say() { printf '{"type":"%s","f":"%s","value":%s}\n' "$1" "$2" "$3"; }

sleep_ms() { sleep "$(awk "BEGIN { printf \"%.3f\", $1 / 1000 }")"; }

now_ms() { date +%s%3N; }

shard_url() {
  printf '%s\n' "$CHAOS_SHARD_URLS" | tr ',' '\n' | sed -n "s/^$1=//p"
}

# psql URL ARGS...: rows only, no command tags; fails on any SQL error.
q() {
  url=$1
  shift
  psql "$url" -X -q -t -A -v ON_ERROR_STOP=1 "$@"
}

# The same with command tags (COPY n, DELETE n) and errors on stdout, for writes.
qw() {
  url=$1
  shift
  psql "$url" -X -t -A -v ON_ERROR_STOP=1 "$@" 2>&1
}

# The fence as one statement that fails (division by zero) when a newer token was served.
fence_sql() {
  echo "select set_config('chaos.token', '$1', true); with f as (update mover_fence set token = $1 where token <= $1 returning 1) select 1 / count(*) from f"
}

# A write on a shard, fenced or not, in one transaction: psql URL SQL. Prints the command
# tags and any error.
write() {
  if [ "$fencing" = on ]; then
    qw "$1" -1 -c "$(fence_sql "$token")" -c "$2"
  else
    qw "$1" -1 -c "select set_config('chaos.token', '$token', true)" -c "$2"
  fi
}

# After a write that printed no tag: exit 3 when the fence refused it, else 1.
refused_or_failed() { # f value output
  case $3 in
    *"division by zero"*)
      say fail "$1" "$(printf '%s' "$2" | sed "s/}\$/,\"reason\":\"fenced\"}/")"
      exit 3 ;;
  esac
  echo "psql-mover: $1 failed: $(printf '%s' "$3" | tail -n 1)" >&2
  say info "$1" "$2"
  exit 1
}

plan=$(q "$CHAOS_ROUTING_URL" -F ' ' -c "select position, turbine_id, from_shard, to_shard from move_plan order by position") || {
  echo "psql-mover: cannot read the move plan from the routing db" >&2
  exit 2
}

# Connected (the plan is read): with `ready = "gate"` the harness handed it a start gate,
# and the scenario clock starts when every box has read it.
if [ -n "${CHAOS_GATE:-}" ]; then
  read -r go <"$CHAOS_GATE"
fi

# Whether every plan turbine is gone from its source shard.
plan_done() {
  for shard in $(printf '%s\n' "$plan" | awk '{ print $3 }' | sort -u); do
    list=$(printf '%s\n' "$plan" | awk -v s="$shard" '$3 == s { printf "%s'\''%s'\''", (n++ ? "," : ""), $2 }')
    left=$(q "$(shard_url "$shard")" -c "select count(*) from readings where turbine_id in ($list)") || return 1
    [ "$left" = 0 ] || return 1
  done
  return 0
}

# Wait for the claim; exit 0 when another box finished the plan meanwhile.
token=""
polls=0
while [ -z "$token" ]; do
  say invoke acquire '{}'
  token=$(q "$CHAOS_ROUTING_URL" -c "select claim_acquire('$job', '$me', $lease_ms)" 2>/dev/null) || token=""
  if [ -n "$token" ]; then
    say ok acquire "{\"token\":$token}"
    break
  fi
  say fail acquire '{}'
  polls=$((polls + 1))
  if [ $((polls % 5)) = 0 ] && plan_done; then
    say ok done '{}'
    exit 0
  fi
  sleep_ms "$poll_ms"
done

# Fence every plan shard at once (one psql each, in parallel), then look at the answers.
if [ "$fencing" = on ]; then
  fences=$(mktemp -d)
  for shard in $(printf '%s\n' "$plan" | awk '{ print $3; print $4 }' | sort -u); do
    say invoke fence "{\"shard\":\"$shard\",\"token\":$token}"
    (q "$(shard_url "$shard")" -1 -c "$(fence_sql "$token")" >/dev/null 2>&1 && touch "$fences/$shard") &
  done
  wait
  for shard in $(printf '%s\n' "$plan" | awk '{ print $3; print $4 }' | sort -u); do
    if [ ! -e "$fences/$shard" ]; then
      rm -rf "$fences"
      say fail fence "{\"shard\":\"$shard\",\"token\":$token,\"reason\":\"fenced\"}"
      exit 3
    fi
    say ok fence "{\"shard\":\"$shard\",\"token\":$token}"
  done
  rm -rf "$fences"
fi

# Renew, with this mover's own habit: a few tries, then stop (it never carries on).
renew() {
  tries=0
  while [ "$tries" -lt "$retries" ]; do
    say invoke renew "{\"token\":$token}"
    r=$(q "$CHAOS_ROUTING_URL" -c "select claim_renew('$job', '$me', $token, $lease_ms)" 2>/dev/null)
    case $r in
      t) say ok renew "{\"token\":$token}"; return 0 ;;
      f) say fail renew "{\"token\":$token,\"reason\":\"lost\"}"; return 1 ;;
    esac
    say fail renew "{\"token\":$token,\"reason\":\"unreachable\"}"
    tries=$((tries + 1))
    sleep_ms "$poll_ms"
  done
  return 1
}

planfile=$(mktemp)
trap 'rm -f "$planfile"' EXIT
printf '%s\n' "$plan" >"$planfile"
while read -r position turbine from to <&3; do
  [ -n "$turbine" ] || continue
  began=$(now_ms)
  src=$(shard_url "$from")
  dst=$(shard_url "$to")
  rows=$(q "$src" -c "select count(*) from readings where turbine_id = '$turbine'") || exit 1
  if [ "$rows" = 0 ]; then
    say ok skip "{\"turbine\":\"$turbine\"}"
    continue
  fi
  # Its own habit: renew before a turbine as well as after it.
  renew || exit 1
  copy="{\"turbine\":\"$turbine\",\"from\":\"$from\",\"to\":\"$to\",\"token\":$token,\"shard\":\"$to\"}"
  say invoke copy "$copy"
  out=$(q "$src" -c "\\copy (select turbine_id, ts, value from readings where turbine_id = '$turbine') to stdout" |
    write "$dst" "\\copy readings from stdin")
  written=$(printf '%s\n' "$out" | sed -n 's/^COPY //p')
  [ -n "$written" ] || refused_or_failed copy "$copy" "$out"
  say ok copy "{\"turbine\":\"$turbine\",\"rows_read\":$rows,\"rows_written\":$written}"
  # Its own pace: the copy at once, then the rest of the turbine's time waited out.
  left=$(awk "BEGIN { printf \"%d\", $copy_ms * $pace - ($(now_ms) - $began) }")
  [ "$left" -gt 0 ] && sleep_ms "$left"
  renew || exit 1
  if [ "$written" = "$rows" ]; then
    delete="{\"turbine\":\"$turbine\",\"shard\":\"$from\",\"token\":$token,\"why\":\"source\"}"
    say invoke delete "$delete"
    out=$(write "$src" "delete from readings where turbine_id = '$turbine'")
    deleted=$(printf '%s\n' "$out" | sed -n 's/^DELETE //p')
    [ -n "$deleted" ] || refused_or_failed delete "$delete" "$out"
    say ok delete "{\"turbine\":\"$turbine\",\"shard\":\"$from\",\"token\":$token,\"why\":\"source\",\"rows\":$deleted}"
  fi
done 3<"$planfile"

q "$CHAOS_ROUTING_URL" -c "select claim_release('$job', '$me', $token)" >/dev/null 2>&1
say ok done '{}'
exit 0
