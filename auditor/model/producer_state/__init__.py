"""The producer-state model: what the broker remembers per producer, and the transactions and
last stable offset that follow from it.

One model, two executions, held equal by a property test:

* :mod:`auditor.model.producer_state.reference` — Kafka's ``ProducerStateManager`` /
  ``ProducerAppendInfo`` / ``ProducerStateEntry`` in plain Python, one batch at
  a time. The forensic timeline replays through it, and the broker-oracle test
  compares its :func:`~auditor.model.producer_state.reference.load_replica` with
  Kafka's own log loading run on the same partition directories.
* :mod:`auditor.model.producer_state.spark` — the same rules as DataFrame
  derivations over whole tables: one row per transaction, the sequence breaks
  with the broker's 5-batch duplicate window, and the last stable offset per
  replica. The audit builds them once (``AuditContext``) and every rule, the
  plots and the timeline read them.

Both read only the *live log* (:mod:`auditor.model.livelog`): the files the
broker's log loading would keep.
"""
