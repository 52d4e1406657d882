"""The audit rule catalog: one module per rule, each exposing ``RULE``.

List them with ``txn-audit rules``; read one with ``txn-audit explain RULE``.
"""
