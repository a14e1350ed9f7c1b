"""The atlas page's HTML and script (locus_model.analysis.atlas fills in the plots and the data; its docstring
holds the page's DOM contract). Every name in the data is set as text (textContent), never as markup."""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1em 2em; color: #222; }}
#layout {{ display: grid; grid-template-columns: minmax(0, 1fr) 24em; gap: 2em; align-items: start; }}
#panel {{ position: sticky; top: 1em; }}
#plots {{ min-width: 0; }}
/* a narrow window or frame (MLflow's artifact viewer): the panel goes under the plot, the plot takes the width */
@media (max-width: 1000px) {{ #layout {{ grid-template-columns: minmax(0, 1fr); }} #panel {{ position: static; }}
  body {{ margin: 0.5em; }} }}
table {{ border-collapse: collapse; }} td, th {{ padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: left; }}
/* the panel's tables never spill out of it (at 1,400 px the estimates' "basis" column was cut off): long names
   wrap, and a table still wider than the panel scrolls inside it */
#panel {{ min-width: 0; }}
#panel table {{ display: block; max-width: 100%; overflow-x: auto; }}
#panel td, #panel th {{ overflow-wrap: anywhere; }}
</style></head>
<body>
<h1>{title}</h1>
<p>{n_models} models placed by their LOCUS embeddings (PCA of the embedding space); {n_portfolio} portfolio members
drawn as diamonds. Click a model (or open <code>#model=NAME</code>) for its {k} nearest neighbours ({metric}
distance in the full embedding space), its capability estimates and its per-benchmark accuracy.</p>
<div id="atlas" data-n-models="{n_models}" data-n-points="" data-selected="">
<div id="layout">
<div id="plots">{plot2d}{plot3d}</div>
<div id="panel">
<label>Model: <input id="model-search" list="model-names" size="30"></label>
<datalist id="model-names">{options}</datalist>
<h2 id="selected">No model selected</h2>
<h3>Nearest neighbours</h3><div id="neighbours"></div>
<h3>Capability estimates</h3><div id="estimates"></div>
<p class="note">estimate: over all of the benchmark's queries, from an onboarded model's answers (90% interval);
observed: on the queries the model answered.</p>
<h3>Per-benchmark accuracy</h3><div id="benchmarks"></div><div id="benchmark-bars"></div>
<div id="other-benchmarks"></div>
</div></div></div>
<script id="atlas-data" type="application/json">{data}</script>
<script>{script}</script>
</body></html>
"""

SCRIPT = """
(function () {
  const data = JSON.parse(document.getElementById('atlas-data').textContent);
  const root = document.getElementById('atlas');
  const index = new Map(data.names.map((n, i) => [n, i]));
  const inPortfolio = new Set(data.portfolio);
  const labelled = new Set(data.labelled);

  function cell(tag, text) { const c = document.createElement(tag); c.textContent = text; return c; }

  function scoreTable(rows) {  // rows of [benchmark, accuracy, n answers]
    const t = document.createElement('table');
    const head = document.createElement('tr');
    head.append(cell('th', 'benchmark'), cell('th', 'accuracy'), cell('th', 'n'));
    t.append(head);
    for (const [b, acc, n] of rows) {
      const tr = document.createElement('tr');
      tr.append(cell('td', b), cell('td', acc.toFixed(3)), cell('td', n === null ? '' : String(n)));
      t.append(tr);
    }
    return t;
  }

  function estimateTable(rows) {  // rows of [benchmark, accuracy, lo, hi, basis]
    const t = document.createElement('table');
    const head = document.createElement('tr');
    head.append(cell('th', 'benchmark'), cell('th', 'accuracy'), cell('th', '90% interval'), cell('th', 'basis'));
    t.append(head);
    for (const [b, acc, lo, hi, basis] of rows) {
      const tr = document.createElement('tr');
      const interval = cell('td', lo === null ? '' : lo.toFixed(3) + ' - ' + hi.toFixed(3));
      interval.style.whiteSpace = 'nowrap';
      tr.append(cell('td', b), cell('td', acc.toFixed(3)), interval, cell('td', basis));
      t.append(tr);
    }
    return t;
  }

  function select(i) {
    const name = data.names[i];
    root.dataset.selected = name;
    document.getElementById('selected').textContent = name + (data.families[i] ? ' (' + data.families[i] + ')' : '')
      + (inPortfolio.has(name) ? ', portfolio member' : '');
    const ol = document.createElement('ol');
    for (const [j, dist] of data.neighbours[i]) {
      const li = document.createElement('li');
      li.dataset.model = data.names[j];
      const a = cell('a', data.names[j]);
      a.href = '#model=' + encodeURIComponent(data.names[j]);
      li.append(a, ' (distance ' + dist.toFixed(3) + (inPortfolio.has(data.names[j]) ? ', portfolio' : '') + ')');
      ol.append(li);
    }
    document.getElementById('neighbours').replaceChildren(ol);
    // an onboarded model's estimates; any other model's observed accuracy (no interval), labelled so
    const est = data.estimates[i] || (data.accuracy[i] || []).map(([b, acc]) => [b, acc, null, null, 'observed']);
    document.getElementById('estimates').replaceChildren(
      est.length ? estimateTable(est) : cell('p', 'No capability estimates for this model.'));
    const box = document.getElementById('benchmarks');
    const row = data.accuracy[i];  // [benchmark, accuracy, n] on the pool's benchmarks it has answers on
    box.replaceChildren(row ? scoreTable(row) : cell('p', 'No per-benchmark accuracy for this model.'));
    const other = data.other[i];
    document.getElementById('other-benchmarks').replaceChildren(...(other.length ? [
      cell('h3', "Other tasks (this model only, not in the pool's benchmarks)"), scoreTable(other)] : []));
    if (window.Plotly) {
      try {
        // horizontal bars: long benchmark names get a left margin that fits them (automargin), never cut; each
        // bar says how many answers it rests on (a bar of 1.0 from 4 answers is not the model's strength)
        if (row) Plotly.react('benchmark-bars', [{type: 'bar', orientation: 'h', y: row.map(r => r[0]),
                                                  x: row.map(r => r[1]),
                                                  text: row.map(r => r[2] === null ? '' : 'n = ' + r[2]),
                                                  textposition: 'outside', cliponaxis: false}],
          {height: 40 + 22 * row.length, width: 360, margin: {t: 10, b: 30, l: 10, r: 60},
           xaxis: {range: [0, 1], title: {text: 'accuracy'}},
           yaxis: {automargin: true, autorange: 'reversed', dtick: 1}},
          {displayModeBar: false});
        else Plotly.purge('benchmark-bars');
        // the arrow names the model unless the plot already draws its name beside it
        Plotly.relayout('atlas-2d', {annotations: [{x: data.xy[i][0], y: data.xy[i][1],
          text: labelled.has(name) ? '' : name, showarrow: true, arrowhead: 2}]});
      } catch (e) { console.error(e); }
    }
  }

  function fromHash() {
    const m = /(?:^#|&)model=([^&]*)/.exec(location.hash);
    if (!m) return;
    const i = index.get(decodeURIComponent(m[1]));
    if (i !== undefined) select(i);
  }

  function choose(i) { history.replaceState(null, '', '#model=' + encodeURIComponent(data.names[i])); select(i); }

  for (const id of ['atlas-2d', 'atlas-3d']) {
    const gd = document.getElementById(id);
    if (gd && gd.on) gd.on('plotly_click', ev => { if (ev.points.length) choose(Number(ev.points[0].customdata)); });
  }
  document.getElementById('model-search').addEventListener('change', ev => {
    const i = index.get(ev.target.value); if (i !== undefined) choose(i);
  });
  window.addEventListener('hashchange', fromHash);
  const gd2 = document.getElementById('atlas-2d');
  // markers Plotly actually drew in the 2-D plot (SVG paths), not the input arrays
  root.dataset.nPoints = gd2 ? gd2.querySelectorAll('.scatterlayer path.point').length : 0;
  fromHash();
})();
"""
