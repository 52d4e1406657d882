"""Forensic views over ingested tables: one partition's timeline, one transactional id's coordinator.

Unlike the rules, which look at every partition at once and report findings,
these answer an operator's follow-up question about one thing: "what happened
on this partition, in order?" (:mod:`auditor.forensics.timeline`, replayed by
:mod:`auditor.forensics.replay`) and "where does the coordinator keep this
transactional id, and what did it record?" (:mod:`auditor.forensics.coordinator_lookup`).
"""
