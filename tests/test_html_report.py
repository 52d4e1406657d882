"""The HTML report's layout on hand-made findings (no Spark): what someone on call reads first.

The findings summary comes first and links to each finding and its partition card; the
remediation commands are grouped per cluster (a block is pasted against one cluster: its
``<broker:port>`` is a broker of that cluster); each advice is printed once per (rule, kind)
with the findings it applies to; long commands wrap inside their box. The Chromium test
lays the page out in a 1280x800 window.
"""

from __future__ import annotations

import re

from report_helpers import has_class, layout, parse_html
from auditor.engine.rule import catalog
from auditor.report import build_report, render
from auditor.report.messages import render as render_detection

T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z
EAST, WEST = "c-east", "c-west"


def finding(rule: str = "hanging-transaction", kind: str = "hanging", **loc) -> dict:
    """A finding as the engine makes it: a detection of a real rule's kind, rendered."""
    r = catalog()[rule]
    ev = {n: None for n in r.evidence_types}
    if "coordinator_epoch" in ev:
        ev["coordinator_epoch"] = 3
    base = dict(cluster_id=EAST, broker_id=1, log_dir="/d/east/b1", topic="orders", partition=0, producer_id=7,
                producer_epoch=2, transactional_id="orders-txn", first_offset=100, last_offset=105, first_timestamp=T0,
                last_timestamp=T0 + 5_000, duration_ms=600_000)
    base.update(loc)
    return render_detection(r, {**base, "kind": kind, "evidence": ev})


def plot(**kw) -> dict:
    p = {"cluster_id": EAST, "broker_id": 1, "log_dir": "/d/east/b1", "topic": "orders", "partition": 0, "t0": T0,
         "t1": T0 + 10_000, "bucket_ms": 1000, "high_watermark": 106, "log_end_offset": 106, "log_start_offset": 0,
         "lso_lag": [{"t": T0 + 10_000, "log_end": 106, "lso": 100, "lag": 6, "lag_ms": 10_000, "pinned_by": 7, "open": 1}],
         "transactions_total": 1,
         "sessions": [{"producer_id": 7, "transactional_id": "orders-txn", "producer_epoch": 2, "marker_epoch": None,
                       "state": "open", "first_offset": 100, "last_offset": 105, "first_timestamp": T0,
                       "last_timestamp": T0 + 5_000, "marker_offset": None, "marker_type": None, "marker_timestamp": None,
                       "coordinator_epoch": None, "data_batches": 2}]}
    p.update(kw)
    return p


def two_clusters(topic: str = "orders", tid: str = "orders-txn", bootstrap: str | None = None):
    """Two clusters with the same hanging transaction (same topic, partition, offset: the same
    command text), a second one only in c-east, and in-flight transactions whose stuck-lso
    advice is the same for all of them."""
    fs = [
        finding(topic=topic, transactional_id=tid),
        finding(rule="stuck-lso", kind="stuck", topic=topic, transactional_id=tid),
        finding(topic="payments", partition=3, producer_id=8, first_offset=10),
        finding(cluster_id=WEST, broker_id=5, log_dir="/d/west/b5", topic=topic, transactional_id=tid),
        finding(rule="stuck-lso", kind="stuck", cluster_id=WEST, broker_id=5, log_dir="/d/west/b5", topic=topic,
                transactional_id=tid),
        *[finding(rule="stuck-lso", kind="open", topic="events", partition=p, producer_id=20 + p, first_offset=5,
                  transactional_id=None, duration_ms=2_000) for p in range(3)],
        *[finding(rule="hanging-transaction", kind="in-flight", topic="events", partition=p, producer_id=20 + p,
                  first_offset=5, transactional_id=None, duration_ms=2_000) for p in range(3)],
    ]
    summary = {
        "clusters": [{"cluster_id": EAST, "brokers": [1, 2]}, {"cluster_id": WEST, "brokers": [5]}],
        "brokers": [{"cluster_id": EAST, "broker_id": 1, "log_dir": "/d/east/b1"},
                    {"cluster_id": EAST, "broker_id": 2, "log_dir": "/d/east/b2"},
                    {"cluster_id": WEST, "broker_id": 5, "log_dir": "/d/west/b5"}],
        "partitions": 6, "batches": 40,
    }
    plots = {"partitions": [plot(topic=topic), plot(cluster_id=WEST, broker_id=5, log_dir="/d/west/b5", topic=topic)]}
    return build_report(fs, summary=summary, plots=plots, bootstrap_server=bootstrap)


def _clusters(page: str) -> dict[str, str]:
    """Cluster id → the text of its remediation box."""
    import html

    out = {}
    for m in re.finditer(r'<div class="cluster" id="rem-\d+"><h3>Cluster <span class="mono">([^<]*)</span></h3>(.*?</pre>)</div>',
                         page, re.S):
        out[html.unescape(m.group(1))] = _text(m.group(2))
    return out


def _text(fragment: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _advice(page: str) -> list[str]:
    return [_text(m) for m in re.findall(r'<div class="advice" id="adv-\d+">(.*?)</div>', page, re.S)]


def test_findings_summary_comes_first_and_links_to_details_and_cards():
    rep = two_clusters()
    page = render(rep, "html")
    order = [page.index(s) for s in ('id="overview"', 'id="findings"', 'id="remediation"', 'id="partitions"')]
    assert order == sorted(order)
    assert page.index('<nav class="toc">') < order[0]
    for target in ("#overview-h", "#findings", "#remediation", "#partitions", "#run"):
        assert f'href="{target}"' in page.split("</nav>")[0]
    p = parse_html(page)
    detail_ids = {a["id"] for t, a in p.tags if t == "tr" and has_class(a, "finding")}
    assert len(detail_ids) == len(rep.findings)
    start, end = page.index('id="overview"'), page.index("</table>", page.index('id="overview"'))
    rows = re.findall(r'<tr class="overview-row">(.*?)</tr>', page[start:end])
    assert len(rows) == len(rep.findings)
    linked = [re.search(r'href="#(f-\d+)"', r).group(1) for r in rows]
    assert sorted(linked) == sorted(detail_ids) and linked == [f"f-{i + 1}" for i in range(len(rows))]
    # rows on a partition with a card link to it; the two clusters' orders-0 are two cards
    cards = [a["id"] for t, a in p.tags if t == "div" and has_class(a, "card-anchor")]
    assert cards == ["p-1", "p-2"]
    assert {re.search(r'href="#(p-\d+)"', r).group(1) for r in rows if "orders-0@100" in r} == {"p-1", "p-2"}
    assert all('href="#p-' not in r for r in rows if "events-" in r or "payments-" in r)  # no card: no link
    assert "orders-0@100" in rows[0] and "producer 7 epoch 2 · orders-txn" in rows[0] and "10m00s" in rows[0]


def test_remediation_is_grouped_per_cluster():
    page = render(two_clusters(), "html")
    boxes = _clusters(page)
    assert set(boxes) == {EAST, WEST}
    same = ("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic orders --partition 0 "
            "--start-offset 100")
    # the same command text in two clusters is two aborts: one in each cluster's block
    assert all(box.count(same) == 1 for box in boxes.values())
    assert "--topic payments" in boxes[EAST] and "--topic payments" not in boxes[WEST]
    assert "brokers: 1 (/d/east/b1), 2 (/d/east/b2)" in boxes[EAST] and "brokers: 5 (/d/west/b5)" in boxes[WEST]
    assert "<broker:port> must be one of brokers 1, 2 of cluster c-east" in boxes[EAST]
    assert "<broker:port> must be broker 5 of cluster c-west" in boxes[WEST]
    # "paste as a whole" only ever about one cluster
    assert all(len(re.findall(r"(?i)paste as a whole", b)) == 1 for b in boxes.values())
    assert sum(len(re.findall(r"(?i)paste as a whole", b)) for b in boxes.values()) == 2
    outside = page
    for m in re.finditer(r'<div class="cluster".*?</pre></div>', page, re.S):  # one box per cluster
        outside = outside.replace(m.group(0), "")
    assert not re.search(r"(?i)paste as a whole", outside)
    assert 'class="warn"' not in page  # no --bootstrap-server: nothing to warn about


def test_one_bootstrap_server_for_two_clusters_is_flagged():
    page = render(two_clusters(bootstrap="kafka-1:9092"), "html")
    warn = [t for tag, a, t in parse_html(page).texts if tag == "p" and has_class(a, "warn")]
    assert len(warn) == 1 and "kafka-1:9092" in warn[0] and "2 clusters" in warn[0]
    assert "<broker:port>" not in "".join(_clusters(page).values())


def test_each_advice_once_per_rule_and_kind():
    rep = two_clusters()
    page = render(rep, "html")
    advice = _advice(page)
    kinds = {(f["rule"], f["kind"], f["remediation"]) for f in rep.findings if f.get("remediation")}
    assert len(advice) == len(kinds)
    for rule, kind, text in kinds:
        (box,) = [a for a in advice if a.startswith(f"{rule} · {kind} ")]
        assert text in box
        ns = [i + 1 for i, f in enumerate(f for fs in rep.by_rule().values() for f in fs)
              if (f["rule"], f["kind"]) == (rule, kind)]
        assert re.findall(r"#(\d+)", box) == [str(n) for n in ns]
        # the advice text itself is printed once on the whole page
        assert _text(page).count(text) == 1, (rule, kind)
    (open_box,) = [a for a in advice if a.startswith("stuck-lso · open ")]
    assert "(3 findings: #" in open_box  # 3 of the rule's 5 findings


def test_escapes_hostile_values_in_the_new_sections():
    evil = "<img src=x onerror=alert(1)>"
    page = render(two_clusters(topic="t<b>", tid=evil), "html")
    p = parse_html(page)
    assert not [t for t, _ in p.tags if t in ("script", "img")]
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "t&lt;b&gt;-0@100" in page


def test_control_and_bidi_characters_from_the_data_are_shown_escaped():
    """ESC, BEL and U+202E (right-to-left override) in a transactional id or topic are shown as
    ``\\x1b``/``\\x07``/``\\u202e`` on the page, as in the terminal and Markdown reports: raw,
    U+202E reverses what follows it on screen, and ESC/BEL travel into a copy-paste."""
    tid = "pay\x1b[2Jments\x07\u202etxn"
    page = render(two_clusters(topic="t\u202eopic", tid=tid), "html")
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in page
    text = _text(page)
    assert "pay\\x1b[2Jments\\x07\\u202etxn" in text and "t\\u202eopic-0@100" in text


def test_layout_in_chromium_summary_in_first_viewport_nothing_cut_off(tmp_path):
    """1280x800: the findings summary starts in the first screenful, and no command box is
    wider than its container even with a 200-character topic and transactional id."""
    long_topic = "orders." + "x" * 200
    page = tmp_path / "report.html"
    page.write_text(render(two_clusters(topic=long_topic, tid="txn-" + "y" * 200, bootstrap="kafka-1:9092"), "html"))
    got = layout(page, 1280, 800)
    assert got["vh"] <= 800
    assert got["tops"]["overview"] < got["vh"], got["tops"]
    assert got["overflows"] == [], got["overflows"]
    assert got["wide"] == [], got["wide"]
    assert got["page_scroll_width"] <= got["page_client_width"]
