"""What the input holds of each partition it touches, besides the files themselves.

A user hands over whole log dirs, single partition directories or a few segment
files. The rules must not mistake "not given" for "not there": a producer whose
earlier batches sit in a segment the user left out looks forgotten by the broker,
and a transaction whose marker sits in a later segment looks open. Discovery
already knows which files were given; this module adds, for every partition
given file by file, which of its directory's segments were *not* given. Only
directory listings are read (the names of the sibling files), never their
contents: the input is what the user chose.

The result is written into the ingest manifest (``_ingest.json``, key
``not_given``) and read by the model (:mod:`auditor.model.coverage`), which turns
it, with the inventory, into per-replica evidence the rules consult.
"""

from __future__ import annotations

import posixpath
from typing import Iterable

from auditor.ingest.discovery import FileInfo, classify_file
from auditor.ingest.storage import as_path


def given_as(fi: FileInfo) -> str:
    """How the file's partition reached the input: ``file`` (named on its own),
    ``partition-dir`` (its directory was the input) or ``log-dir`` (a log dir,
    or a directory of log dirs, was)."""
    if fi.path == fi.input_root:
        return "file"
    if fi.topic is not None and posixpath.dirname(fi.path) == fi.input_root.rstrip("/"):
        return "partition-dir"
    return "log-dir"


def left_out(given: Iterable[int], missing: Iterable[int]) -> dict:
    """Where the segments of a partition directory that the input lacks (``missing``, base
    offsets) lie against those it holds (``given``): how many ``before`` the first held one,
    ``after`` the last and ``between``; ``first_given_offset``; ``next_not_given_offset``, where
    the first one after the held window starts; and the offsets a gap between held segments may
    span, ``gap_from_offset`` (the first one left out between them) to ``gap_to_offset`` (the next
    held segment after the last one left out). Used for segments the user did not give (here)
    and for listed segments that could not be read (:mod:`auditor.model.coverage`)."""
    segs, missing = sorted(given), sorted(missing)
    lo, hi = (segs[0], segs[-1]) if segs else (None, None)
    before = [b for b in missing if lo is None or b < lo]
    after = [b for b in missing if hi is not None and b > hi]
    between = [b for b in missing if lo is not None and lo < b < hi]
    return {
        "before": len(before), "after": len(after), "between": len(between),
        # the given window: from the first given segment to where the next one not given starts
        "first_given_offset": lo,
        "next_not_given_offset": after[0] if after else None,
        # the offsets a gap between given segments may hold: from the first segment left out
        # between them to the next given segment after the last one left out
        "gap_from_offset": between[0] if between else None,
        "gap_to_offset": min((b for b in segs if b > between[-1]), default=None) if between else None,
    }


def not_given(files: Iterable[FileInfo]) -> list[dict]:
    """Per partition directory some of whose segments were given one by one: the
    live segments (``NNN.log``) of that directory that were not given, counted
    before the first given segment, after the last one and between them, with
    the offsets that bound the gap. Partitions given as a directory or within a
    log dir are complete by construction and are not listed."""
    by_dir: dict[str, list[FileInfo]] = {}
    for fi in files:
        if fi.topic is not None and fi.partition is not None and given_as(fi) == "file":
            by_dir.setdefault(posixpath.dirname(fi.path), []).append(fi)
    out = []
    for d, given in sorted(by_dir.items()):
        segs = [fi.base_offset for fi in given if fi.kind == "segment" and fi.file_status == "live"
                and fi.base_offset is not None]
        try:
            names = [c.name for c in as_path(d).iterdir()]
        except OSError:
            continue  # the directory cannot be listed: nothing to compare with
        present = sorted(b for k, s, b, _ in (classify_file(n) for n in names)
                         if k == "segment" and s == "live" and b is not None)
        missing = sorted(set(present) - set(segs))
        if not missing:
            continue
        fi = given[0]
        out.append({
            "log_dir": fi.log_dir, "topic": fi.topic, "partition": fi.partition, "dir": d,
            "segments_in_dir": len(present), "segments_given": len(segs), **left_out(segs, missing),
        })
    return out
