"""Requests no well-behaved client sends, through kafka-python's protocol layer: a transactional
produce after the transaction ended (KAFKA-12671) or to a partition never added to it, and bare
InitProducerId calls. Batches are built by kafka-python's DefaultRecordBatchBuilder, as a client would."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from scripts.capture.bookkeeping import tp
from scripts.kafka.harness import RawConnection

if TYPE_CHECKING:
    from scripts.capture.clients import CkProducer
    from scripts.capture.context import Ctx


def build_batch(pid: int, epoch: int, seq: int, values: list[bytes], transactional: bool,
                keys: list[bytes] | None = None) -> bytes:
    """One uncompressed v2 batch of ``values`` for producer ``pid``/``epoch`` from sequence ``seq``,
    timestamps (CreateTime) from this machine's clock now."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamp=now, key=keys[i] if keys else None, value=v, headers=[])
    return bytes(b.build())


def raw_produce(conn: RawConnection, topic: str, partition: int, batch: bytes, transactional_id: str | None) -> tuple[int, int]:
    """ProduceRequest v8 with one batch; returns (error_code, base_offset)."""
    from kafka.protocol.producer import ProduceRequest

    req = ProduceRequest(
        transactional_id=transactional_id, acks=-1, timeout_ms=10000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    resp = conn.call(req, 8)
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


def raw_init_producer_id(conn: RawConnection, transactional_id: str | None = None) -> tuple[int, int, int]:
    from kafka.protocol.producer import InitProducerIdRequest

    req = InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
    r = conn.call(req, 3)
    return r.error_code, r.producer_id, r.producer_epoch


# --------------------------------------------------------------------------------------------------


def late_write(ctx: Ctx, conn: RawConnection, p: CkProducer, txn_id: str, topic: str, part: int,
                seq: int, values: list[bytes], why: str, keys: list[bytes] | None = None) -> dict:
    """A transactional produce for ``p``'s current producer id/epoch that its transaction does not
    cover (after the transaction's marker, or to a partition never added), recorded as a raw
    request; returns where it landed."""
    pid, epoch = p.identity()
    err, off = raw_produce(conn, topic, part, build_batch(pid, epoch, seq, values, True, keys), txn_id)
    ctx.rec.raw.append({"request": "Produce v8 (kafka-python protocol layer)", "transactional_id": txn_id,
                        "partition": tp(topic, part), "producer_id": pid, "producer_epoch": epoch,
                        "base_sequence": seq, "records": len(values), "is_transactional": True,
                        "error_code": err, "base_offset": off, "why": why})
    if err != 0:
        raise RuntimeError(f"raw produce rejected with error {err}")
    if keys:
        for i, (k, v) in enumerate(zip(keys, values)):
            ctx.rec.keyed_record(topic, part, off + i, k, v is None, "raw")
    return {"producer_id": pid, "producer_epoch": epoch, "first_offset": off, "last_offset": off + len(values) - 1,
            "base_sequence": seq}
