"""Helpers for the report tests: headless Chromium, HTML parsing, synthetic findings.

Not a test module (no ``test_`` prefix). Chromium is a required tool of the
suite (``scripts/setup.sh`` installs it): when it is missing, the tests that
need it fail, they are never skipped.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--no-first-run", "--disable-extensions"]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not installed: run scripts/setup.sh (apt-get install chromium)"
    return exe


def _run(args: list[str], timeout: int = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="txn-audit-chromium-") as profile:
        return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


def console_messages(stderr: str) -> list[str]:
    """What the page logged to its console (errors, CSP violations, uncaught exceptions):
    Chromium prints them as ``INFO:CONSOLE`` lines with ``--enable-logging=stderr``."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def dump_dom(html_file: Path) -> tuple[str, list[str]]:
    """(the DOM after Chromium loaded the page, its console messages)."""
    res = _run(["--enable-logging=stderr", "--v=0", "--dump-dom", html_file.absolute().as_uri()])
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout, console_messages(res.stderr)


def screenshot(html_file: Path, png: Path, size: str = "1400,2000") -> None:
    res = _run([f"--screenshot={png}", f"--window-size={size}", html_file.absolute().as_uri()])
    assert res.returncode == 0 and png.exists(), res.stderr[-2000:]


def png_info(png: Path) -> tuple[int, int, int]:
    """(width, height, distinct byte values in the decompressed image data) of a PNG:
    enough to tell a rendered page from a blank one without an imaging library."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    return width, height, len(set(raw))


class Elements(HTMLParser):
    """Start tags with attributes, and the text inside selected elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self._stack: list[tuple[str, dict, list[str]]] = []
        self.texts: list[tuple[str, dict, str]] = []  # (tag, attrs, text) of every closed element

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag not in ("meta", "br", "wbr", "line", "path", "rect", "img", "link", "input"):
            self._stack.append((tag, a, []))

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                t, a, buf = self._stack[i]
                text = "".join(buf)
                del self._stack[i:]
                self.texts.append((t, a, text))
                for _, _, outer in self._stack:
                    outer.append(text)
                return

    def handle_data(self, data):
        if self._stack:
            self._stack[-1][2].append(data)


def parse_html(text: str) -> Elements:
    p = Elements()
    p.feed(text)
    p.close()
    return p


def has_class(attrs: dict, *classes: str) -> bool:
    have = set((attrs.get("class") or "").split())
    return all(c in have for c in classes)


def table_rows(html_text: str) -> list[list[str]]:
    """Rows of every <table> in rendered (Markdown → HTML) text, cells as plain text."""
    p = parse_html(html_text)
    rows: list[list[str]] = []
    cells: list[str] = []
    for tag, _, text in p.texts:  # closing order: cells close before their row
        if tag in ("td", "th"):
            cells.append(text)
        elif tag == "tr":
            rows.append(cells)
            cells = []
    return rows


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# Measures the page as Chromium lays it out. The report itself runs no script (its CSP forbids
# it): a copy without the CSP meta tag gets this script, which writes what it measured into the
# DOM that ``--dump-dom`` prints.
_LAYOUT_SCRIPT = """<script>(function(){
var r={vw:window.innerWidth,vh:window.innerHeight,
 page_scroll_width:document.documentElement.scrollWidth,page_client_width:document.documentElement.clientWidth,
 tops:{},overflows:[]};
document.querySelectorAll('[id]').forEach(function(e){r.tops[e.id]=e.getBoundingClientRect().top+window.scrollY;});
document.querySelectorAll('pre,code').forEach(function(e){
 var b=e.getBoundingClientRect(),p=e.parentElement.getBoundingClientRect(),cs=getComputedStyle(e);
 var box=e.tagName==='PRE'&&(e.scrollWidth>e.clientWidth+1);
 if(box||b.right>p.right+1||b.right>document.documentElement.clientWidth)
  r.overflows.push({tag:e.tagName,overflow_x:cs.overflowX,scroll_width:e.scrollWidth,client_width:e.clientWidth,
   right:b.right,parent_right:p.right,text:e.textContent.slice(0,120)});});
// what is wider than its own box or reaches past the page's right edge, outside any box that scrolls sideways
r.wide=[];document.querySelectorAll('main *').forEach(function(e){
 var b=e.getBoundingClientRect(),cs=getComputedStyle(e);
 var own=e.clientWidth>0&&e.scrollWidth>e.clientWidth+1&&cs.overflowX==='visible';
 if(!own&&b.right<=document.documentElement.clientWidth+1)return;
 for(var a=e.parentElement;a;a=a.parentElement){var o=getComputedStyle(a).overflowX;if(o==='auto'||o==='scroll')return;}
 r.wide.push({tag:e.tagName,cls:e.getAttribute('class'),right:b.right,text:(e.textContent||'').slice(0,80)});});
// ids of elements the browser does not render (inside a closed <details>: content-visibility, display:none)
r.hidden=[];document.querySelectorAll('main [id]').forEach(function(e){if(e.checkVisibility?!e.checkVisibility():e.getClientRects().length===0)r.hidden.push(e.id);});
// legend entries of a chart reaching past the chart's right edge (cut off)
r.legend_cut=[];document.querySelectorAll('svg g.legend-entry').forEach(function(e){
 var s=e.ownerSVGElement.getBoundingClientRect(),b=e.getBoundingClientRect();
 if(s.width>0&&b.right>s.right+1)r.legend_cut.push({mark:e.getAttribute('data-mark'),right:b.right,svg_right:s.right});});
var out=document.createElement('template');out.id='layout-result';out.setAttribute('data-json',JSON.stringify(r));
document.body.appendChild(out);})();</script>"""


def layout(html_file: Path, width: int = 1280, height: int = 800) -> dict:
    """What Chromium lays out in a ``width`` x ``height`` window: ``vw``/``vh`` (the viewport),
    ``tops`` (page y of every element with an id), ``overflows`` (each <pre> whose text is wider
    than its box, and each <pre>/<code> whose box reaches past its parent or the viewport), ``wide``
    (elements reaching past the viewport outside any sideways-scrolling box), the page's ``page_scroll_width`` /
    ``page_client_width``, ``hidden`` (ids of elements not rendered: inside a closed ``<details>``) and
    ``legend_cut`` (chart legend entries reaching past their chart's right edge)."""
    import json

    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html_file.read_text())
    assert "Content-Security-Policy" not in text
    probe = html_file.with_name(html_file.stem + ".layout.html")
    probe.write_text(text.replace("</body>", _LAYOUT_SCRIPT + "</body>", 1))
    res = _run(["--enable-logging=stderr", "--v=0", f"--window-size={width},{height}", "--dump-dom", probe.absolute().as_uri()])
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r'<template id="layout-result" data-json="([^"]*)"', res.stdout)
    assert m, (console_messages(res.stderr), res.stdout[-2000:])
    import html as _html

    return json.loads(_html.unescape(m.group(1)))
