"""The HTML report's layout on hand-made findings (no Spark): what someone on call reads first.

The findings summary comes first, worst first with the info rows folded away, and links to each
finding and its partition card; the findings are shown as incidents (a hanging transaction and
the LSO it pins: one block, one set of commands); the remediation commands are grouped per cluster (a block is pasted against one cluster: its
``<broker:port>`` is a broker of that cluster); each advice is printed once per (rule, kind)
with the findings it applies to; long commands wrap inside their box. The Chromium test
lays the page out in a 1280x800 window.
"""

from __future__ import annotations

import re

from report_helpers import dump_dom, has_class, layout, parse_html
from auditor.engine.rule import catalog, severity_rank
from auditor.report import build_report, render
from auditor.engine.messages import render as render_detection
from auditor.report.render_table import also_text

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
    start, end = page.index('id="overview"'), page.index('id="findings"')
    rows = re.findall(r'<tr class="overview-row[^"]*">(.*?)</tr>', page[start:end])
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
        ns = [i + 1 for i, f in enumerate(f for inc in rep.incidents() for f in inc.findings)
              if (f["rule"], f["kind"]) == (rule, kind)]
        assert re.findall(r"#(\d+)", box) == [str(n) for n in ns]
        # the advice text itself is printed once on the whole page
        assert _text(page).count(text) == 1, (rule, kind)
    (open_box,) = [a for a in advice if a.startswith("stuck-lso · open ")]
    assert "(3 findings: #" in open_box  # 3 of the rule's 5 findings
    # later incidents of the same kind link to the box instead of repeating it
    (anchor,) = re.findall(r'<div class="advice" id="(adv-\d+)"><p><b>stuck-lso · stuck', page)
    assert page.count(f'href="#{anchor}"') == 1  # the west incident's stuck-lso links to the east one's box


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


# -- severity order, incidents, legends, tooltips ------------------------------------------------


def critical_below_info():
    """What the by-rule order buried: hanging-transaction's critical late write and its eleven
    in-flight (info) findings came first, so pid-block-overlap's critical finding sat below eleven
    info rows. Plus an error of a third rule."""
    fs = [finding(kind="late-write"),
          *[finding(kind="in-flight", topic="events", partition=p, producer_id=30 + p, first_offset=5,
                    transactional_id=None, duration_ms=2_000) for p in range(11)],
          finding(rule="pid-block-overlap", kind="overlap", topic=None, partition=None, producer_id=None,
                  producer_epoch=None, transactional_id=None, first_offset=500, last_offset=None, duration_ms=None),
          finding(rule="out-of-order-sequence", kind="gap", topic="ledger", producer_id=9, first_offset=12)]
    return build_report(fs, plots={"partitions": [plot()]})


def _overview_rows(page: str) -> list[tuple[str, bool, str]]:
    """(severity, inside the folded info <details>, row html) of each findings-summary row, in page order."""
    start, end = page.index('id="overview"'), page.index('id="findings"')
    section = page[start:end]
    fold = section.find('<details class="info-rows"')
    return [(re.search(r'<span class="sev (\w+)">', m.group(0)).group(1), 0 <= fold < m.start(), m.group(0))
            for m in re.finditer(r'<tr class="overview-row[^"]*">.*?</tr>', section)]


def test_summary_and_findings_are_worst_first_with_info_folded(tmp_path):
    rep = critical_below_info()
    page = render(rep, "html")
    rows = _overview_rows(page)
    assert len(rows) == len(rep.findings) == 14
    sevs = [sev for sev, _, _ in rows]
    assert sevs == sorted(sevs, key=severity_rank, reverse=True), sevs
    assert sevs[:3] == ["critical", "critical", "error"]  # both criticals above every info row
    assert "pid-block-overlap" in rows[1][2]
    # every info row, and only they, in the folded part; its closed <details> says how many
    assert [folded for _, folded, _ in rows] == [sev == "info" for sev in sevs]
    summaries = re.findall(r'<details class="(info-rows|info-incidents)"( open)?[^>]*><summary>([^<]*)</summary>', page)
    assert [(cls, opened) for cls, opened, _ in summaries] == [("info-rows", ""), ("info-incidents", "")]
    assert all(text.startswith("11 info findings (11 incidents)") for _, _, text in summaries)
    # the findings section in the same order: the incident blocks' severities, worst first
    blocks = re.findall(r'<tbody class="incident (\w+)"', page)
    assert blocks == sevs  # one finding per incident here
    # in Chromium: the info findings are not rendered until unfolded; the others are
    f = tmp_path / "r.html"
    f.write_text(page)
    got = layout(f, 1280, 800)
    numbers = {int(m) for m in re.findall(r'<tr class="finding[^"]*" id="f-(\d+)"', page)}
    assert numbers == set(range(1, 15))
    info = {f"f-{n}" for n in numbers if sevs[n - 1] == "info"}
    assert info and info <= set(got["hidden"]), got["hidden"]
    assert not {f"f-{n}" for n in numbers} - info & set(got["hidden"])
    assert got["tops"]["overview"] < got["vh"]


def test_one_block_per_incident_with_its_commands_once():
    rep = two_clusters()
    page = render(rep, "html")
    incidents = rep.incidents()
    p = parse_html(page)
    bodies = [(a["id"], text) for tag, a, text in p.texts if tag == "tbody" and has_class(a, "incident")]
    assert [i for i, _ in bodies] == [inc.id for inc in incidents]
    # the ids are the JSON's incident ids
    import json

    ids = [f["incident"] for f in json.loads(render(rep, "json"))["findings"]]
    assert set(ids) == {inc.id for inc in incidents}
    (east,) = [inc for inc in incidents if inc.lead["cluster_id"] == EAST and inc.lead["topic"] == "orders"]
    assert [f["rule"] for f in east.findings] == ["hanging-transaction", "stuck-lso"]
    block = re.search(rf'<tbody class="incident \w+" id="{east.id}">(.*?)</tbody>', page, re.S).group(1)
    # the stuck LSO is a line inside the hanging transaction's block, not a block of its own
    rows = re.findall(r'<tr class="finding (lead|also)" id="f-(\d+)">', block)
    assert [kind for kind, _ in rows] == ["lead", "also"]
    assert _text(block).count(also_text(east.findings[1])) == 1
    abort = ("kafka-transactions.sh --bootstrap-server <broker:port> abort --topic orders --partition 0 "
             "--start-offset 100")
    assert _text(block).count(abort) == 1
    assert len(re.findall(r"<pre>", block)) == 1  # one set of commands
    # the findings section as a whole: the abort once per incident (east and west), not once per finding
    findings = page[page.index('id="findings"'):page.index('id="remediation"')]
    assert _text(findings).count(abort) == 2
    # fewer blocks than findings: each stuck-lso is inside its hanging transaction's block
    assert len(bodies) == len(incidents) == 6 and len(rep.findings) == 11


def legend_plot() -> dict:
    """A partition whose sessions have every state the chart draws: committed, aborted, open, and a
    marker whose data the dump does not hold (marker-only: no epoch, offsets or first timestamp)."""
    def session(state: str, t: int, **kw) -> dict:
        s = {"producer_id": 7, "transactional_id": "orders-txn", "producer_epoch": 2, "marker_epoch": 2,
             "state": state, "first_offset": 10 + t, "last_offset": 11 + t, "first_timestamp": T0 + t * 1000,
             "last_timestamp": T0 + t * 1000 + 300, "marker_offset": 12 + t, "marker_type": state.upper(),
             "marker_timestamp": T0 + t * 1000 + 500, "coordinator_epoch": 3, "data_batches": 2}
        s.update(kw)
        return s
    sessions = [session("commit", 0), session("abort", 2),
                session("marker-only", 4, producer_epoch=None, first_offset=None, last_offset=None,
                        first_timestamp=None, last_timestamp=None, marker_type="COMMIT", data_batches=0),
                *plot()["sessions"]]
    return plot(sessions=sessions, transactions_total=len(sessions))


_MARKS = {("rect", "bar"): "txn", ("line", "marker"): "marker", ("path", "finding"): "finding",
          ("line", "finding-line"): "finding", ("path", "lag-area"): "lag", ("path", "lag-line"): "lag"}


def _marks(svg: str) -> tuple[set[str], set[str]]:
    """(the kinds of mark an <svg> draws outside its legend, the kinds its legend entries name)."""
    legend_at = svg.find('<g class="legend">')
    drawn = set()
    for m in re.finditer(r'<(rect|line|path) class="([^"]*)"', svg):
        if legend_at >= 0 and m.start() > legend_at:
            continue
        classes = m.group(2).split()
        for (tag, cls), mark in _MARKS.items():
            if m.group(1) == tag and cls in classes:
                drawn.add(mark if mark not in ("txn", "marker") else f"{mark} {classes[-1]}")
    return drawn, set(re.findall(r'<g class="legend-entry" data-mark="([^"]*)">', svg))


def test_every_mark_of_the_plots_has_a_legend_entry(tmp_path):
    rep = build_report([finding(kind="late-write")], plots={"partitions": [legend_plot()]})
    page = render(rep, "html")
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(svgs) == 2
    lso, sessions = (_marks(s) for s in svgs)
    assert lso[0] == {"lag", "finding"} and lso[1] == lso[0]
    assert sessions[0] == {"txn commit", "txn abort", "txn open", "txn marker-only", "marker commit", "marker abort",
                           "finding"}
    assert sessions[1] == sessions[0]  # an entry per mark drawn, and no entry for a mark not drawn
    # each entry's swatch is drawn with its mark's classes, and a label says what it is
    entries = re.findall(r'<g class="legend-entry" data-mark="txn marker-only">(.*?)</g>', page)
    assert entries and 'class="txn marker-only"' in entries[0] and "marker only" in _text(entries[0])
    # Chromium: no legend entry is cut off at the chart's right edge
    f = tmp_path / "r.html"
    f.write_text(page)
    got = layout(f, 1280, 800)
    assert got["legend_cut"] == [], got["legend_cut"]


def test_no_none_in_any_tooltip_or_text(tmp_path):
    """Unknown values are left out: a marker-only bar's tooltip used to read "epoch None: offsets
    None-None", and a finding without a producer printed "(producer None)"."""
    sparse = finding(kind="late-write", producer_epoch=None, last_offset=None, last_timestamp=None)
    rep = build_report([sparse, finding(rule="pid-block-overlap", kind="overlap", topic=None, partition=None,
                                        producer_id=None, producer_epoch=None, transactional_id=None,
                                        first_offset=500, last_offset=None, first_timestamp=None, duration_ms=None)],
                       plots={"partitions": [legend_plot() | {"broker_id": None, "log_end_offset": None,
                                                             "lso_lag": [{"t": T0 + 10_000, "log_end": 106, "lso": None,
                                                                          "lag": 6, "lag_ms": None, "pinned_by": 7}]}]})
    page = render(rep, "html")
    f = tmp_path / "r.html"
    f.write_text(page)
    dom, console = dump_dom(f)
    assert console == []
    d = parse_html(dom)
    texts = [text for tag, _, text in d.texts if tag in ("title", "body")]
    bad = [t for t in texts if re.search(r"\bNone\b", t)]
    assert not bad, [re.findall(r".{0,60}\bNone\b.{0,30}", t) for t in bad]
    # what is known is still said: the marker-only bar's tooltip names its marker
    titles = [text for tag, _, text in d.texts if tag == "title"]
    assert "producer 7: COMMIT marker at offset 16 (epoch 2, coordinator epoch 3) at 2024-05-01T12:00:04.500Z, " \
           "with no data batch of its transaction in the dump" in titles, titles
