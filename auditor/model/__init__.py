"""The domain model: what the broker (``LogLoader``/``UnifiedLog``, ``ProducerStateManager``,
the transaction coordinator) would know of the input, and what the input itself can show.

Every derived fact the rules, the forensic commands and the reports state is
computed here, once (one fact, one place); the audit context
(:mod:`auditor.engine.views`) only reads the tables, calls these functions and
caches what they return:

* :mod:`auditor.model.clusters` — the key of a cluster (its id, or ``logdir:<path>``
  for a broker without one), in Spark and in Python;
* :mod:`auditor.model.livelog` — the *live log*: which files, and which bytes of
  them, the broker's log loading keeps (no ``.deleted``/``.cleaned`` copies, no
  replaced or recovered-away segments, no retired replica directories);
* :mod:`auditor.model.replica` — each replica's *log start*, *log end* and *high
  watermark* (from the live log and the log dir's checkpoints), and whether the
  cleaner compacts the partition;
* :mod:`auditor.model.config` — the configuration the model depends on, from the
  metadata log: a topic's ``cleanup.policy``, a broker's ``producer.id.expiration.ms``;
* :mod:`auditor.model.clock` — the reference instant of each cluster, the "now"
  every age is measured against;
* :mod:`auditor.model.producer_state` — *producer state* (``ProducerStateManager``),
  the transactions and the *last stable offset* that follow from it, in two
  executions held equal: :mod:`~auditor.model.producer_state.reference` (plain
  Python, one batch at a time: the timeline's replay, the broker oracle) and
  :mod:`~auditor.model.producer_state.spark` (DataFrames over whole tables: the audit);
* :mod:`auditor.model.coordinator` — the *coordinator state*: ``__transaction_state``
  records once per offset, each id's history and latest record, the producer ids
  it names, the partitions the input holds;
* :mod:`auditor.model.coverage` — what the input holds: partitions given whole
  or segment by segment, the segments left out, the checkpoints and
  ``__transaction_state`` partitions given. A verdict that needs evidence the
  input lacks says so instead of guessing;
* :mod:`auditor.model.verdicts` — the one classification of each open
  transaction (in-flight, two-phase-commit, hanging, late-write,
  unknown-to-coordinator, undetermined) with its one age, read by ``hanging-transaction``, ``stuck-lso``
  and the report;
* :mod:`auditor.model.groups` — the consumer groups behind open transactional
  offset commits: the group's protocol (classic or KIP-848 consumer) and its
  members as of the commit, from the ``__consumer_offsets`` records before it.
"""
