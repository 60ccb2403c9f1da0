#!/usr/bin/python3
# A mover that holds its lease in Redis through python3-redis's stock `redis.lock.Lock` (Debian's
# package, used unchanged: `SET NX PX` to acquire, its Lua scripts to reacquire and release),
# written apart from the reference mover from docs/mover-protocol.md: psycopg2 for the
# databases, its own pace (a turbine in CHAOS_BATCHES transactions spread over the copy time),
# its own habits (renew before and after each turbine, never inside one; a few tries; it stops
# when a renewal says the lock is gone).
#
#   chaos run gc-pause --lock redis --mover-cmd 'workloads/examples/redis-mover.py'
#
# The lock's token (the key's value) is CHAOS_BOX, which redis-py's `acquire(token=...)`
# accepts, so the harness's observer names the holder from the key itself. Redis mints no
# fencing token: this mover takes one by `INCR <CHAOS_LOCK_KEY>:token` right after the recipe's
# acquire returns (a separate call, not atomic with the SET; the reference mover does both in
# one script), and writes with it in both modes.
#
# Its own switch (environment): REDIS_MOVER_FENCING=on|off (default off): fence every plan
# shard when it takes the lock, and begin every shard write with the fence statement.
import json
import os
import sys
import time

import psycopg2
import redis
import redis.lock

BOX = os.environ["CHAOS_BOX"]
LEASE_MS = int(os.environ["CHAOS_LEASE_MS"])
POLL_MS = int(os.environ["CHAOS_POLL_MS"])
COPY_MS = int(os.environ["CHAOS_COPY_MS"])
BATCHES = max(1, int(os.environ.get("CHAOS_BATCHES", "10")))
KEY = os.environ.get("CHAOS_LOCK_KEY", "lock:" + os.environ["CHAOS_JOB"])
FENCING = os.environ.get("REDIS_MOVER_FENCING", "off") == "on"


def say(kind, f, value):
    print(json.dumps({"type": kind, "f": f, "value": value}), flush=True)


def connect(url):
    """A connection named after the box; every use is one transaction (`with conn:`)."""
    return psycopg2.connect(url, application_name=BOX, connect_timeout=5)


def shard_urls():
    out = {}
    for pair in os.environ["CHAOS_SHARD_URLS"].split(","):
        name, url = pair.split("=", 1)
        out[name] = url
    return out


class Fenced(Exception):
    """A shard refused this token; `shard_token` is the newer one it had served."""

    def __init__(self, shard_token):
        super().__init__(shard_token)
        self.shard_token = shard_token


def write(conn, token, sql, args=()):
    """One shard transaction: the fence first (fencing on), else the token as a setting."""
    with conn:
        with conn.cursor() as cur:
            if FENCING:
                cur.execute("select set_config('chaos.token', %s, true)", (str(token),))
                cur.execute(
                    "update mover_fence set token = %s where token <= %s", (token, token)
                )
                if cur.rowcount == 0:
                    cur.execute("select token from mover_fence")
                    raise Fenced(cur.fetchone()[0])
            else:
                cur.execute("select set_config('chaos.token', %s, true)", (str(token),))
            cur.execute(sql, args)
            return cur.rowcount


def main():
    url = os.environ["CHAOS_LOCK_URLS"].split(",")[0]
    wait = max(LEASE_MS / 1000.0, 1.0)
    r = redis.Redis.from_url(url, socket_timeout=wait, socket_connect_timeout=wait)
    routing = connect(os.environ["CHAOS_ROUTING_URL"])
    urls = shard_urls()
    shards = {name: connect(url) for name, url in urls.items()}
    with routing, routing.cursor() as cur:
        cur.execute(
            "select position, turbine_id, from_shard, to_shard from move_plan order by position"
        )
        plan = cur.fetchall()
    if os.environ.get("CHAOS_GATE"):
        open(os.environ["CHAOS_GATE"]).readline()

    lock = redis.lock.Lock(r, KEY, timeout=LEASE_MS / 1000.0, sleep=0.01)
    while True:
        say("invoke", "acquire", {})
        try:
            got = lock.acquire(blocking_timeout=POLL_MS / 1000.0, token=BOX)
        except redis.exceptions.RedisError as e:  # the lock service unreachable: try again
            say("info", "acquire", {"error": str(e)})
            time.sleep(POLL_MS / 1000.0)
            continue
        if got:
            break
        say("fail", "acquire", {})
        if all(count(shards[f], t) == 0 for _, t, f, _ in plan):
            say("ok", "done", {})
            return 0
    token = r.incr(KEY + ":token")
    say("ok", "acquire", {"token": token})

    if FENCING:
        for name in sorted({f for _, _, f, _ in plan} | {t for _, _, _, t in plan}):
            try:
                write(shards[name], token, "select 1")
            except Fenced as f:
                say("fail", "fence", {"shard": name, "token": token, "reason": "fenced",
                                      "shard_token": f.shard_token})
                return 3
            say("ok", "fence", {"shard": name, "token": token})

    def renew():
        for _ in range(3):
            say("invoke", "renew", {"token": token})
            try:
                lock.reacquire()
            except redis.exceptions.LockNotOwnedError:
                say("fail", "renew", {"token": token, "reason": "lost"})
                return False
            except redis.exceptions.RedisError:
                say("fail", "renew", {"token": token, "reason": "unreachable"})
                time.sleep(POLL_MS / 1000.0)
                continue
            say("ok", "renew", {"token": token})
            return True
        return False

    for _, turbine, src, dst in plan:
        began = time.monotonic()
        rows = count(shards[src], turbine)
        if rows == 0:
            say("ok", "skip", {"turbine": turbine})
            continue
        if not renew():
            return 1
        copy = {"turbine": turbine, "from": src, "to": dst, "token": token, "shard": dst}
        say("invoke", "copy", copy)
        with shards[src], shards[src].cursor() as cur:
            cur.execute(
                "select turbine_id, ts, value from readings where turbine_id = %s", (turbine,)
            )
            data = cur.fetchall()
        # Its own pace: the copy in CHAOS_BATCHES transactions spread over the copy time, with
        # no look at the lock between them (it renews around a turbine, not inside one).
        written = 0
        step = max(1, -(-len(data) // BATCHES))
        for i in range(0, len(data), step):
            part = data[i:i + step]
            try:
                written += write(
                    shards[dst],
                    token,
                    "insert into readings (turbine_id, ts, value) select * from unnest(%s::text[], %s::timestamptz[], %s::float8[])",
                    ([r[0] for r in part], [r[1] for r in part], [r[2] for r in part]),
                )
            except Fenced as f:
                say("fail", "copy", dict(copy, reason="fenced", shard_token=f.shard_token))
                return 3
            time.sleep(COPY_MS / 1000.0 / BATCHES)
        say("ok", "copy", {"turbine": turbine, "rows_read": len(data), "rows_written": written})
        left = COPY_MS / 1000.0 - (time.monotonic() - began)
        if left > 0:
            time.sleep(left)
        if not renew():
            return 1
        if written == rows:
            delete = {"turbine": turbine, "shard": src, "token": token, "why": "source"}
            say("invoke", "delete", delete)
            try:
                n = write(shards[src], token, "delete from readings where turbine_id = %s", (turbine,))
            except Fenced as f:
                say("fail", "delete", dict(delete, reason="fenced", shard_token=f.shard_token))
                return 3
            say("ok", "delete", dict(delete, rows=n))
    try:
        lock.release()
    except redis.exceptions.LockError:
        pass  # it expired meanwhile: nothing to give back
    say("ok", "done", {})
    return 0


def count(conn, turbine):
    with conn, conn.cursor() as cur:
        cur.execute("select count(*) from readings where turbine_id = %s", (turbine,))
        return cur.fetchone()[0]


if __name__ == "__main__":
    sys.exit(main())
