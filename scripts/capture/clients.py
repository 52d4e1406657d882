"""Client wrappers: a confluent-kafka (librdkafka) producer that knows its producer id and epoch,
and the client versions written into expected.json. Kafka's own Java producer is
:class:`scripts.kafka.harness.JavaProducer`; raw requests are in :mod:`scripts.capture.raw`."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from scripts.capture.bookkeeping import tp

if TYPE_CHECKING:
    from scripts.capture.context import Ctx


class CkProducer:
    """A confluent-kafka producer whose producer id/epoch come from librdkafka's statistics (``eos``)."""

    def __init__(self, ctx: "Ctx", name: str, conf: dict) -> None:
        from confluent_kafka import Producer

        self.ctx = ctx
        self.name = name
        self.eos: dict = {}
        self.stats_n = 0
        self.stats_ts = 0
        self.pending: list = []
        self.sent_per_tp: dict[str, int] = {}  # messages handed to librdkafka per partition in this epoch
        full = {
            "bootstrap.servers": ctx.broker.bootstrap,
            "statistics.interval.ms": 50,
            "stats_cb": self._stats,
            "logger": ctx.client_log,
            "linger.ms": 5,
            "client.id": name,
        }
        full.update(conf)
        self.conf = conf
        self.p = Producer(full)

    def _stats(self, js: str) -> None:
        st = json.loads(js)
        self.eos = st.get("eos") or {}
        self.stats_ts = st.get("ts", 0)
        self.stats_n += 1

    def identity(self) -> tuple[int, int]:
        """(producer_id, producer_epoch) from a statistics snapshot librdkafka took after this call.

        Stats carry ``ts``, librdkafka's CLOCK_MONOTONIC in microseconds (the clock Python's
        ``time.monotonic`` reads on Linux), so stale callbacks still queued are skipped.
        """
        t_call = time.monotonic() * 1e6
        deadline = time.monotonic() + 10
        while not (self.stats_ts >= t_call and int(self.eos.get("producer_id", -1)) >= 0):
            self.p.poll(0.02)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no fresh statistics with a producer id ({self.eos})")
        return int(self.eos["producer_id"]), int(self.eos["producer_epoch"])

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None) -> None:
        def dr(err, msg):
            self.pending.append((err, msg.topic(), msg.partition(), msg.offset()))
            if msg.key() is not None and err is None:
                self.ctx.rec.keyed_record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value() is None,
                                          self.name)

        self.p.produce(topic, value=value, key=key, partition=partition, on_delivery=dr)
        k = tp(topic, partition)
        self.sent_per_tp[k] = self.sent_per_tp.get(k, 0) + 1

    def flush(self) -> list[tuple[str, int, int]]:
        left = self.p.flush(30)
        if left:
            raise RuntimeError(f"{self.name}: {left} messages undelivered")
        out = []
        for err, t, p, o in self.pending:
            if err is not None:
                raise RuntimeError(f"{self.name}: delivery failed: {err}")
            out.append((t, p, o))
        self.pending = []
        return out

    def close(self) -> None:
        try:
            self.p.flush(1)
        except Exception:  # noqa: BLE001 - broker may be gone (kill scenarios)
            pass
        del self.p


_CK = None


def ck_version() -> str:
    """``<confluent-kafka version> (librdkafka <version>)``, as expected.json names the client."""
    global _CK
    if _CK is None:
        import confluent_kafka

        v, lv = confluent_kafka.version(), confluent_kafka.libversion()
        _CK = f"{v[0] if isinstance(v, tuple) else v} (librdkafka {lv[0] if isinstance(lv, tuple) else lv})"
    return _CK


def kp_version() -> str:
    """kafka-python's version (its protocol layer sends the raw requests)."""
    import kafka

    return kafka.__version__
