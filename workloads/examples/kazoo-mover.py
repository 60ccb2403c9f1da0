#!/usr/bin/python3
# A mover that holds its lease in ZooKeeper through python3-kazoo's stock `Lock` recipe (Debian's
# package, used unchanged, its identifier set to CHAOS_BOX), written apart from the reference
# mover from docs/mover-protocol.md: psycopg2 for the databases, its own pace (a turbine in
# CHAOS_BATCHES transactions spread over the copy time), its own habits (it checks the lock
# before and after each turbine, never inside one; a few tries; it stops when a check says the
# lock is gone).
#
#   chaos run gc-pause --lock zookeeper --mover-cmd 'workloads/examples/kazoo-mover.py'
#
# The recipe's node `<uuid>__lock__<seq>` under CHAOS_LOCK_KEY carries the identifier as its
# data, so the harness names the holder by its box. Its session's timeout is the lease
# (CHAOS_LEASE_MS); kazoo heartbeats for it, so a "renewal" here is a look: the session still
# connected and the lock node still there. Its fencing token is the lock node's czxid, read after
# the recipe's acquire.
#
# Its own switch (environment): KAZOO_MOVER_FENCING=on|off (default off): fence every plan
# shard when it takes the lock, and begin every shard write with the fence statement.
import json
import os
import sys
import time

import psycopg2
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import LockTimeout

BOX = os.environ["CHAOS_BOX"]
LEASE_MS = int(os.environ["CHAOS_LEASE_MS"])
POLL_MS = int(os.environ["CHAOS_POLL_MS"])
COPY_MS = int(os.environ["CHAOS_COPY_MS"])
BATCHES = max(1, int(os.environ.get("CHAOS_BATCHES", "10")))
KEY = os.environ.get("CHAOS_LOCK_KEY", "/locks/" + os.environ["CHAOS_JOB"])
FENCING = os.environ.get("KAZOO_MOVER_FENCING", "off") == "on"


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
    zk = KazooClient(hosts=os.environ["CHAOS_LOCK_URLS"], timeout=LEASE_MS / 1000.0)
    zk.start(timeout=10)
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

    lock = zk.Lock(KEY, identifier=BOX)
    while True:
        say("invoke", "acquire", {})
        try:
            got = lock.acquire(timeout=POLL_MS / 1000.0)
        except LockTimeout:
            got = False
        except Exception as e:  # the lock service unreachable: try again
            say("info", "acquire", {"error": str(e)})
            time.sleep(POLL_MS / 1000.0)
            continue
        if got:
            break
        say("fail", "acquire", {})
        if all(count(shards[f], t) == 0 for _, t, f, _ in plan):
            say("ok", "done", {})
            return 0
    node = KEY + "/" + lock.node
    _, meta = zk.get(node)
    token = meta.czxid
    say("ok", "acquire", {"token": token, "lock_value": BOX})

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
            if zk.state == KazooState.LOST:
                say("fail", "renew", {"token": token, "reason": "lost"})
                return False
            try:
                meta = zk.exists(node)
            except Exception:
                say("fail", "renew", {"token": token, "reason": "unreachable"})
                time.sleep(POLL_MS / 1000.0)
                continue
            if meta is not None and meta.czxid == token:
                say("ok", "renew", {"token": token})
                return True
            say("fail", "renew", {"token": token, "reason": "lost"})
            return False
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
    lock.release()
    zk.stop()
    say("ok", "done", {})
    return 0


def count(conn, turbine):
    with conn, conn.cursor() as cur:
        cur.execute("select count(*) from readings where turbine_id = %s", (turbine,))
        return cur.fetchone()[0]


if __name__ == "__main__":
    sys.exit(main())
