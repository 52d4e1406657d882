"""What several rules share (not a rule: modules starting with _ are skipped)."""

from __future__ import annotations

from auditor.engine.rule import Command, Evidence
from auditor.model.advice import GUARD, LEGACY_FORM

# kafka-transactions.sh abort (KIP-664): the --start-offset form on brokers 3.0+, the older form
# needs the producer's epoch and the coordinator epoch of its last marker (0 when none is known)
ABORT = (
    Command("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
            "--start-offset {first_offset}"),
    Command("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} "
            "--producer-id {producer_id} --producer-epoch {producer_epoch} --coordinator-epoch {coordinator_epoch:default=0}",
            applies_to=LEGACY_FORM),
)

# where the input holds no record of the coordinator's (auditor.model.advice.CHECK_FIRST): ask it first
# (describe where the transactional id is known; find-hanging lists the partition only when the coordinator
# no longer has it in a transaction), then the abort, guarded by what they show; the form for brokers
# before 3.0 is left out: those brokers answer neither check (DescribeProducers, DescribeTransactions: 3.0)
CHECK_THEN_ABORT = (
    Command("kafka-transactions.sh --bootstrap-server <broker:port> describe --transactional-id {transactional_id}"),
    Command("kafka-transactions.sh --bootstrap-server <broker:port> find-hanging --topic {topic} --partition {partition}"),
    Command(ABORT[0].template, applies_to=GUARD),
)

COORDINATOR_EPOCH = Evidence("coordinator_epoch", "int",
                             "coordinator epoch of the producer's last marker on the partition (the abort's "
                             "--coordinator-epoch); null when it has none")
COMPACTED = Evidence("compacted", "boolean", "the topic is compacted (cleanup.policy has compact)")
