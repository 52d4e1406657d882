"""Capture real Kafka broker log dirs into ``sample_logs/<scenario>/`` with their ground truth.

Each scenario runs against a fresh single-node KRaft broker, or a 3-node KRaft cluster (combined
broker+controller nodes, 3 voters) for the multi-broker ones, or a ZooKeeper-mode 3.5.2 broker with
its own ZooKeeper for the legacy message formats (``scripts/kafka/harness.py``), drives
it with real clients — confluent-kafka (librdkafka: transactional and idempotent producers,
consumers, admin), Kafka's own Java producer for transaction version 2, and kafka-python's protocol
layer for the requests no well-behaved client sends — then stops the broker cleanly or SIGKILLs it,
copies its log dir to ``sample_logs/<scenario>/broker-1/`` (each node's to ``broker-<node.id>/``)
unmodified, and writes
``sample_logs/<scenario>/expected.json``.

Ground truth is client-side bookkeeping only: the producer id/epoch the client held (librdkafka's
statistics ``eos`` block, the Java client's transaction manager, or the InitProducerId response),
the partition and offset of every record from the delivery reports / produce responses, the
outcome the client asked for, and end offsets (high watermark, last stable offset) the broker
reported over ListOffsets before it was stopped. Never the auditor's output.

Mutated scenarios copy part of a real capture and change named bytes (recomputing CRC-32C); the
exact change is written into their expected.json under ``mutation``.

Usage::

    .venv/bin/python scripts/capture_scenarios.py               # all scenarios (~3.5 min)
    .venv/bin/python scripts/capture_scenarios.py --only clean  # one (mutations need their base)
    .venv/bin/python scripts/capture_scenarios.py --list
    .venv/bin/python -m scripts.capture --only clean --out /tmp/captures  # the same, elsewhere

The package (imported as ``scripts.capture`` from the project root; pytest puts the root on
``sys.path`` through ``pythonpath`` in pyproject.toml):

* :mod:`~scripts.capture.paths` -- where captures go (``sample_logs/`` by default) and brokers run;
* :mod:`~scripts.capture.bookkeeping` -- :class:`Txn`, :class:`Recorder`: what the clients did;
* :mod:`~scripts.capture.clients` -- the librdkafka producer wrapper, client versions;
* :mod:`~scripts.capture.context` -- :class:`Ctx`, one scenario run: broker(s), admin, transactions;
* :mod:`~scripts.capture.raw` -- raw requests through kafka-python's protocol layer;
* :mod:`~scripts.capture.workloads` -- write patterns families share;
* :mod:`~scripts.capture.registry` -- :class:`Scenario`, the ``@scenario`` registry, the family list;
* scenario families, one module each: :mod:`~scripts.capture.transactions`,
  :mod:`~scripts.capture.groups`, :mod:`~scripts.capture.producers`,
  :mod:`~scripts.capture.two_phase_commit`, :mod:`~scripts.capture.clusters` (multi-broker, failover),
  :mod:`~scripts.capture.compaction`, :mod:`~scripts.capture.legacy_formats`,
  :mod:`~scripts.capture.releases`, :mod:`~scripts.capture.tiered_storage`;
* :mod:`~scripts.capture.inspection` -- what the log dirs hold during a run (auditor.formats decoders);
* :mod:`~scripts.capture.mutations` -- derived captures with named bytes changed;
* :mod:`~scripts.capture.driver` -- :func:`capture`, :func:`run_mutation`, the command line.
"""
