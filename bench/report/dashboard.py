"""One self-contained HTML dashboard: plotly.js inlined once, opens with no network.

Figures are stored as JSON in one <script type="application/json"> block and drawn by a small
inline script when their workload is selected (drawing only what is visible keeps a 10,000-
result page fast to open). Two selects pick the workload and the precision; `#all` in the URL
draws every section (the browser test uses it). All data text is escaped twice over: strings
are HTML-escaped before they reach a figure (plotly.js renders a small HTML subset) or the
page, and the JSON block has <, >, & and line separators written as \\u escapes, so a
'</script>' in a model name cannot close the block. The page writes its own status into
#bench-status (figures expected/drawn, errors caught, resources loaded, ms to ready), which
the browser test reads.
"""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np

from bench.errors import BenchInputError

_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if np.isnan(o) else float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(f"not JSON serializable: {type(o)}")


def _clean(o):
    """Return o with NaN/inf floats as None (JSON.parse rejects NaN)."""
    if isinstance(o, float):
        return None if math.isnan(o) or math.isinf(o) else o
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_clean(v) for v in o]
    return o


def script_json(obj) -> str:
    """Return obj as JSON that is safe inside a <script> element (no '<', '>' or '&' characters)."""
    text = json.dumps(_clean(obj), default=_default, separators=(",", ":"), allow_nan=False)
    for ch, rep in _JSON_ESCAPES.items():
        text = text.replace(ch, rep)
    return text


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
.controls{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:1px solid #ddd;z-index:10}
.controls label{margin-right:1.5em}
.warn{background:#fff4e5;border-left:4px solid #e69500;padding:.5em 1em;margin:.5em 0}
.note{color:#666;font-style:italic;margin:1em 0}
.scroll{overflow-x:auto;max-width:100%;margin:.5em 0 1.5em}
ul.warn{list-style:none}
details.warn summary{cursor:pointer}
table.speedup{border-collapse:collapse;font-size:13px}
table.speedup td,table.speedup th{border:1px solid #ccc;padding:2px 6px;text-align:right}
table.speedup tr.failed td{color:#b00020}
.fig{min-height:300px}
section.workload{display:none}
"""

# Runs first: catches errors from everything after it (plotly.js included).
_ERROR_HOOK = """
window.__benchErrors=[];
window.addEventListener('error',function(e){window.__benchErrors.push(String(e.message||e.type))},true);
window.addEventListener('unhandledrejection',function(e){window.__benchErrors.push('unhandled rejection: '+e.reason)});
(function(){var ce=console.error;console.error=function(){window.__benchErrors.push(Array.prototype.join.call(arguments,' '));ce.apply(console,arguments)}})();
"""

_APP = """
(function(){
var D=JSON.parse(document.getElementById('bench-data').textContent);
var drawn={};
var wsel=document.getElementById('sel-workload'), psel=document.getElementById('sel-precision');
function visibility(fig){return fig.data.map(function(t){return psel.value==='all'||!t.meta||!t.meta.precision||t.meta.precision===psel.value})}
function draw(div){
  var i=+div.getAttribute('data-fig'); var fig=D.figures[i];
  var layout=Object.assign({template:D.template,autosize:true},fig.layout);
  var vis=visibility(fig); fig.data.forEach(function(t,k){t.visible=vis[k]});
  Plotly.newPlot(div,fig.data,layout,{responsive:true,displaylogo:false});
  drawn[i]=true;
}
function refresh(){
  var all=location.hash==='#all';
  document.querySelectorAll('section.workload').forEach(function(s){
    var on=all||s.getAttribute('data-workload')===wsel.value; s.style.display=on?'block':'none';
    if(!on) return;
    s.querySelectorAll('div.fig').forEach(function(div){
      var i=+div.getAttribute('data-fig');
      if(!drawn[i]) draw(div); else Plotly.restyle(div,{visible:visibility(D.figures[i])});
    });
  });
  document.querySelectorAll('section.global div.fig').forEach(function(div){
    var i=+div.getAttribute('data-fig');
    if(!drawn[i]) draw(div); else Plotly.restyle(div,{visible:visibility(D.figures[i])});
  });
  status();
}
function status(){
  var st=document.getElementById('bench-status');
  var shown=Array.prototype.filter.call(document.querySelectorAll('div.fig'),function(d){return d.offsetParent!==null});
  var ok=shown.filter(function(d){return d.querySelector('svg.main-svg')!==null}).length;
  var res=performance.getEntriesByType('resource').map(function(r){return r.name});
  st.setAttribute('data-expected',shown.length); st.setAttribute('data-drawn',ok);
  st.setAttribute('data-errors',JSON.stringify(window.__benchErrors));
  st.setAttribute('data-resources',JSON.stringify(res));
  st.setAttribute('data-ready-ms',Math.round(performance.now()));
  st.setAttribute('data-state',(ok===shown.length&&window.__benchErrors.length===0&&res.length===0)?'ok':'bad');
}
wsel.addEventListener('change',refresh); psel.addEventListener('change',refresh);
window.addEventListener('hashchange',refresh);
refresh();
})();
"""


def _cell(text: str) -> str:
    """Return a Markdown table cell as HTML, escaped; a cell that is bold as a whole (`**total**`) in bold."""
    if len(text) > 4 and text.startswith("**") and text.endswith("**"):
        return f"<b>{html.escape(text[2:-2])}</b>"
    return html.escape(text)


def markdown_table_html(text: str) -> str:
    """Return the pipe tables of a Markdown text as HTML tables (cells escaped), headings as headings, other lines as notes."""
    out, rows = [], []

    def flush():
        if rows:
            head, *body = rows
            out.append("<table class='speedup'><thead><tr>" + "".join(f"<th>{_cell(c)}</th>" for c in head)
                       + "</tr></thead><tbody>" + "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in r) + "</tr>"
                                                          for r in body) + "</tbody></table>")
            rows.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        else:
            flush()
            if line.startswith("#"):
                out.append(f"<h4>{html.escape(line.lstrip('#').strip())}</h4>")
            elif line.strip():
                out.append(f"<p class='note'>{html.escape(line.strip())}</p>")
    flush()
    return "\n".join(out)


def warnings_summary(warnings: list[str], table_warnings: list[str]) -> str:
    """Return the page's one box of warnings: how many there are and where, the ones no table shows listed in it
    (folded when long), '' when there are none."""
    if not warnings and not table_warnings:
        return ""
    parts = []
    if table_warnings:
        kinds = [(sum("differ by" in w for w in table_warnings), "unstable figures"),
                 (sum("busy machine" in w for w in table_warnings), "a busy machine")]
        said = ", ".join(f"{n} about {what}" for n, what in kinds if n)
        parts.append(f"{len(table_warnings)} under the speedup tables below" + (f" ({said})" if said else ""))
    if warnings:
        parts.append(f"{len(warnings)} about these results")
    head = f"⚠ {len(warnings) + len(table_warnings)} warning(s): " + "; ".join(parts)
    if not warnings:
        return f"<div class='warn'>{html.escape(head)}</div>"
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    return (f"<details class='warn'{' open' if len(warnings) <= 3 else ''}><summary>{html.escape(head)}</summary>"
            f"<ul>{items}</ul></details>")


def require_plotly() -> None:
    """Raise BenchInputError naming the fix where plotly (the dashboard's figures) is not installed."""
    try:
        import plotly.io  # noqa: F401
    except ImportError as exc:
        raise BenchInputError("the dashboard needs plotly, which this Python lacks: pip install plotly (one of bench's "
                              "dependencies; `pip install -e .` installs them all)") from exc


def dashboard_html(
    sections: list[dict],
    global_sections: list[dict],
    title: str,
    precisions: list[str],
    warnings: list[str],
    environment_html: str,
    table_warnings: list[str] = (),
) -> str:
    """Return the dashboard page.

    sections: one per workload table: {"key", "figures": [(heading, fig dict or None, note)], "table_html"};
    global_sections: {"heading", "figures": [...], "html": optional table HTML} shown under every workload
    (the OOM frontier, kernels). warnings: those no table shows, listed at the top; table_warnings: those
    shown under their tables, only counted at the top (warnings_summary).
    """
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    figures: list[dict] = []

    def fig_block(heading: str, fig: dict | None, note: str) -> str:
        parts = [f"<h3>{html.escape(heading)}</h3>"]
        if note:
            parts.append(f"<p class='note'>{html.escape(note)}</p>")
        if fig is not None:
            parts.append(f"<div class='fig' data-fig='{len(figures)}'></div>")
            figures.append(fig)
        return "\n".join(parts)

    body = []
    for i, sec in enumerate(sections):
        blocks = [fig_block(*f) for f in sec["figures"]]
        body.append(f"<section class='workload' data-workload='{i}'><h2>{html.escape(sec['key'])}</h2>\n"
                    + "\n".join(blocks) + "\n<h3>Speedup table</h3>\n" + sec["table_html"] + "</section>")
    for sec in global_sections:
        blocks = [sec.get("html", "")] + [fig_block(*f) for f in sec["figures"]]
        body.append(f"<section class='global'><h2>{html.escape(sec['heading'])}</h2>\n" + "\n".join(blocks) + "</section>")
    wopts = "".join(f"<option value='{i}'>{html.escape(s['key'])}</option>" for i, s in enumerate(sections))
    popts = "<option value='all'>all</option>" + "".join(
        f"<option value='{html.escape(p, quote=True)}'>{html.escape(p)}</option>" for p in precisions)
    warn = warnings_summary(list(warnings), list(table_warnings))
    template = pio.templates["plotly_white"].to_plotly_json()
    data = script_json({"figures": figures, "template": template})
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
        f"<script>{_ERROR_HOOK}</script>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1>{warn}"
        f"<div class='controls'><label>workload <select id='sel-workload'>{wopts}</select></label>"
        f"<label>precision <select id='sel-precision'>{popts}</select></label></div>\n"
        + "\n".join(body)
        + f"\n<h2>Environment</h2>{environment_html}"
        "<div id='bench-status' data-state='loading'></div>"
        f"<script type='application/json' id='bench-data'>{data}</script>"
        f"<script>{_APP}</script></body></html>\n"
    )

