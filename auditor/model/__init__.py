"""The domain model: what the broker (``UnifiedLog``, ``ProducerStateManager``, the
transaction coordinator) would know of the input, and what the input itself can show.

Every derived fact the rules, the forensic commands and the reports state is
computed here, once:

* :mod:`auditor.model.coverage` — what the input holds: partitions given whole
  or segment by segment, the segments left out, the checkpoints and
  ``__transaction_state`` partitions given. A verdict that needs evidence the
  input lacks says so instead of guessing;
* :mod:`auditor.model.verdicts` — the one classification of each open
  transaction (in-flight, hanging, late-write, unknown-to-coordinator,
  undetermined) with its one age, read by ``hanging-transaction``, ``stuck-lso``
  and the report.

The live log (:mod:`auditor.engine.livelog`), producer state, transactions and
the last stable offset (:mod:`auditor.producer_state`) and the coordinator's
records (:mod:`auditor.engine.coordinator`) are the model's other parts; the
audit context (:mod:`auditor.engine.views`) builds each once per audit and
caches it.
"""
