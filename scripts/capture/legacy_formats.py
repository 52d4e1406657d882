"""Message formats 0 and 1 (a ZooKeeper-mode 3.5.2 broker converting v2 batches down on append)."""

from __future__ import annotations

from scripts.capture.bookkeeping import tp
from scripts.capture.context import Ctx
from scripts.capture.registry import scenario
from scripts.kafka.harness import PRE_VERIFICATION


LEGACY_FLUSHES = (1, 5, 25, 3)  # records per produce request (one batch; one wrapper when compressed)
LEGACY_FORMATS = (("0.10.0", 1), ("0.9.0", 0))  # topic message.format.version -> the magic it writes
LEGACY_CODECS = ("none", "gzip", "snappy", "lz4")


@scenario("legacy-message-formats", PRE_VERIFICATION, zookeeper=True,
          overrides={"inter.broker.protocol.version": "2.8", "log.message.format.version": "2.8"})
def sc_legacy_message_formats(ctx: Ctx) -> dict:
    """A ZooKeeper-mode broker (3.5.2, `inter.broker.protocol.version` 2.8, the last below 3.0, so topic
    configs `message.format.version` still apply) keeps topics in message format 1 (`0.10.0`) and 0
    (`0.9.0`). Kafka's Java producer (3.5.2 jars, not idempotent: old formats have no producer ids)
    sends v2 batches compressed with gzip, snappy, lz4 or not at all; the broker converts each batch
    down to the topic's format on append: a compressed batch becomes one legacy *wrapper* message
    whose value holds the records as inner messages (format 1: relative inner offsets, the wrapper
    carrying the last absolute one; format 0: absolute inner offsets; lz4 in format 0 with the old
    broken frame-header checksum), an uncompressed one a message per record. One format-1 topic uses
    LogAppendTime (inner timestamps are the wrapper's). Per topic 34 records in 4 produce requests
    of 1, 5, 25 and 3 records, every other record keyed, some values null."""
    topics = []
    for fmt, magic in LEGACY_FORMATS:
        for codec in LEGACY_CODECS:
            topics.append((f"format{magic}-{codec}", fmt, magic, codec, "CreateTime"))
    topics.append(("format1-gzip-logappendtime", "0.10.0", 1, "gzip", "LogAppendTime"))
    for topic, fmt, _, _, ts_type in topics:
        ctx.create_topic(topic, 1, 2048, **{"message.format.version": fmt, "message.timestamp.type": ts_type})
    steps: dict[str, dict] = {}
    for codec in LEGACY_CODECS:
        # linger.ms of a minute: a batch goes out on flush() only, so each flush is one produce request
        p = ctx.java(f"java-{codec}", **{"compression.type": codec, "enable.idempotence": "false", "acks": "all",
                                        "linger.ms": 60000})
        ctx.rec.producer(f"java-{codec}", client=f"kafka-clients {ctx.version} (Java)", kind="plain",
                         compression=codec)
        for topic, fmt, magic, _, ts_type in (t for t in topics if t[3] == codec):
            flushes = []
            n = 0
            for size in LEGACY_FLUSHES:
                for _ in range(size):
                    value = "~null" if n % 6 == 5 else f"{topic}-{n}-" + "x" * (n % 7)  # null: keyed (odd n) only
                    if n % 2:
                        p.call("sendkv", topic, 0, f"key-{n % 5}", value)
                    else:
                        p.call("send", topic, 0, value)
                    n += 1
                recs = [(r["topic"], r["partition"], r["offset"]) for r in p.call("flush")["records"]]
                ctx.rec.write(f"java-{codec}", "plain", -1, -1, recs)
                flushes.append([o for _, _, o in recs])
            steps[tp(topic, 0)] = {"message_format_version": fmt, "magic": magic, "producer_compression": codec,
                                   "timestamp_type": ts_type, "produce_requests": flushes}
    tps = [(t[0], 0) for t in topics]
    ctx.record_end_offsets(tps)
    return {
        "description": sc_legacy_message_formats.__doc__,
        "steps": {"topics": steps, "why": "each produce request is one v2 batch, which the broker converts to one "
                                          "legacy wrapper (compressed) or one message per record (none); "
                                          "offsets from the producer's futures"},
        "expect": {"anomalies": []},
    }
