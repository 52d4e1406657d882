"""Write patterns several scenario families share (record values, mixed transactional rounds, keyed
rounds for compacted topics)."""

from __future__ import annotations

import random

from scripts.capture.context import Ctx


def val(tag: str, i: int) -> bytes:
    """A record value that says which write it was: ``<tag>-<i>``."""
    return f"{tag}-{i}".encode()


def mixed_rounds(ctx: Ctx, rng: random.Random, a, b, j, idem, rounds: int = 24) -> None:
    """Transactions over ``orders`` 0-2 by two librdkafka producers (``a``, ``b``) and the Java
    producer ``j`` in turn (every 4th aborted), with idempotent writes of ``idem`` between them."""
    n = 0
    for r in range(rounds):
        outcome = "ABORT" if r % 4 == 3 else "COMMIT"
        parts = rng.sample(range(3), rng.choice([1, 2, 3]))
        writes = []
        for part in parts:
            for _ in range(rng.randint(1, 3)):
                writes.append(("orders", part, val(f"r{r}", n)))
                n += 1
        who = r % 3
        if who == 0:
            ctx.ck_txn(a, writes, outcome)
        elif who == 1:
            ctx.ck_txn(b, writes, outcome)
        else:
            ctx.java_txn(j, [(t, p, v.decode()) for t, p, v in writes], outcome)
        if r % 2 == 0:
            part = rng.randrange(3)
            ctx.idem_write(idem, [("orders", part, val("idem", r * 10 + k)) for k in range(rng.randint(1, 3))])


def kv_round(ctx: Ctx, rng: random.Random, r: int, topic: str, parts: list[int], tag: str,
              keys: int = 6, tomb_p: float = 0.2) -> list[tuple]:
    """Keyed writes for one transaction: 1-3 records per partition over a small key space, some tombstones."""
    writes = []
    for part in parts:
        for i in range(rng.randint(1, 3)):
            k = f"k{rng.randrange(keys)}"
            v = None if rng.random() < tomb_p else f"{tag}{r}.{i}"
            writes.append((topic, part, k, v))
    return writes


def ck_kv(writes: list[tuple]) -> list[tuple]:
    """librdkafka wants bytes: keys encoded, tombstone values stay None."""
    return [(t, p, k.encode(), None if v is None else v.encode()) for t, p, k, v in writes]
