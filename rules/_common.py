"""What several rules share (not a rule: modules starting with _ are skipped)."""

from __future__ import annotations

from auditor.engine.rule import Command, Evidence

# kafka-transactions.sh abort (KIP-664): the --start-offset form on brokers 3.0+, the older form
# needs the producer's epoch and the coordinator epoch of its last marker (0 when none is known)
ABORT = (
    Command("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
            "--start-offset {first_offset}"),
    Command("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
            "--producer-id {producer_id} --producer-epoch {producer_epoch} --coordinator-epoch {coordinator_epoch:default=0}",
            applies_to="brokers before 3.0"),
)

COORDINATOR_EPOCH = Evidence("coordinator_epoch", "int",
                             "coordinator epoch of the producer's last marker on the partition (the abort's "
                             "--coordinator-epoch); null when it has none")
COMPACTED = Evidence("compacted", "boolean", "the topic is compacted (cleanup.policy has compact)")
