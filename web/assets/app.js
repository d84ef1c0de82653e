// app.js: the kiln dashboard, a single page without a build step: it reads /api, draws each view
// (hot ops, best-so-far curve, search tree, candidate, failures, roofline) and follows the run live
// through /api/stream (server-sent events). Chart.js and highlight.js are Debian's, loaded by
// index.html as the globals Chart and hljs.

// The gate's outcomes (src/gate/prove.c), and "waiting" for a candidate not judged yet.
const OUTCOMES = ['ok', 'compile_error', 'mismatch', 'unwritten', 'nan', 'input_modified', 'timeout',
  'crashed', 'resource', 'impossible', 'slower', 'waiting'];
const COLOURS = {
  ok: '#1a7f37', compile_error: '#8250df', mismatch: '#cf222e', unwritten: '#bc4c00',
  nan: '#bf8700', input_modified: '#953800', timeout: '#0969da', crashed: '#24292f',
  resource: '#bf3989', impossible: '#d1242f', slower: '#57606a', waiting: '#8c959f',
};
const FEED_MAX = 200;

// ---- small helpers ------------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

// el('div', {class: 'x', text: 'hi', 'data-id': 3, on: {click: f}}, child, ...): a DOM element;
// text only ever goes in as text, never as HTML.
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function svg(tag, attrs = {}) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
  return e;
}

async function api(path) {
  const r = await fetch(path, {headers: {Accept: 'application/json'}});
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new Error((body && body.error) || `${path}: HTTP ${r.status}`);
  return body;
}

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

function fmtUs(us) {
  if (!isNum(us)) return '–';
  if (us >= 1e6) return `${(us / 1e6).toPrecision(3)} s`;
  if (us >= 1e3) return `${(us / 1e3).toPrecision(3)} ms`;
  return `${us.toPrecision(3)} µs`;
}
const fmtPct = (v, digits = 1) => (isNum(v) ? `${v.toFixed(v < 1 && v > 0 ? 3 : digits)} %` : '–');
// log-axis ticks: 1, 2, 5 per decade, short numbers
function logTick(v) {
  const m = v / Math.pow(10, Math.floor(Math.log10(v)));
  if (![1, 2, 5].some((k) => Math.abs(m - k) < 1e-6)) return '';
  if (v >= 1e9) return `${v / 1e9}G`;
  if (v >= 1e6) return `${v / 1e6}M`;
  if (v >= 1e3) return `${v / 1e3}k`;
  return String(+v.toPrecision(2));
}
const fmtX = (v) => (isNum(v) ? `${v.toFixed(v >= 10 ? 1 : 2)}×` : '–');
// A problem's speedup as the store's rule allows it (kiln_store_speedup_judge): the figure, "!" when the
// winner's spread is over 5 %, "n.s." when the spreads allow no speedup, "noisy" when eager's own spread is
// over 5 % (not divided by).
function fmtSpeedup(p) {
  switch (p.speedup_verdict) {
    case 'noisy': return `${fmtX(p.speedup)}!`;
    case 'not_significant': return 'n.s.';
    case 'noisy_baseline': return 'noisy';
    default: return fmtX(p.speedup);
  }
}
function speedupTitle(p) {
  const spread = (v) => (isNum(v) ? `${v.toFixed(1)} %` : 'not measured');
  const ratio = isNum(p.speedup_ratio) ? `eager / best = ${p.speedup_ratio.toFixed(2)}; ` : '';
  return `${ratio}spread of eager ${spread(p.eager_spread_pct)}, of the best ` +
    `${spread(p.best ? p.best.spread_pct : null)}` +
    ({noisy: '; the best\'s spread is over 5 %', not_significant: '; the spreads allow no speedup',
      noisy_baseline: '; eager\'s spread is over 5 %: not divided by'}[p.speedup_verdict] || '');
}
const fmtNum = (v, p = 3) => (isNum(v) ? (Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3)
  ? v.toExponential(p - 1) : String(+v.toPrecision(p))) : '–');

function fmtDuration(s) {
  if (!isNum(s)) return '–';
  s = Math.max(0, Math.floor(s));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const pad = (x) => String(x).padStart(2, '0');
  return h ? `${h}:${pad(m)}:${pad(sec)}` : `${m}:${pad(sec)}`;
}

function fmtClock(unix) {
  if (!isNum(unix)) return '';
  const d = new Date(unix * 1000);
  return d.toLocaleTimeString([], {hour12: false});
}

function badge(outcome) {
  return el('span', {class: 'badge', style: `background:${COLOURS[outcome] || '#57606a'}`,
    'data-outcome': outcome, text: outcome || 'waiting'});
}

function candLink(id, label) {
  return el('a', {href: `#/candidate/${id}`, 'data-candidate-link': id, text: label || `#${id}`});
}

// red (0) → amber (0.5, as fast as eager) → green (1, speed of light)
function valueColour(v) {
  if (!isNum(v)) return '#d0d7de';
  const stops = [[0, [207, 34, 46]], [0.5, [212, 167, 44]], [1, [26, 127, 55]]];
  v = Math.min(1, Math.max(0, v));
  const i = v <= 0.5 ? 0 : 1;
  const [x0, c0] = stops[i], [x1, c1] = stops[i + 1];
  const t = (v - x0) / (x1 - x0);
  const c = c0.map((a, k) => Math.round(a + (c1[k] - a) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

// ---- state ----------------------------------------------------------------------------------------

const S = {
  run: null, fetchedAt: 0,
  problems: [], byId: new Map(),
  sort: {key: 'share', dir: -1},
  view: null, problemId: null,
  curve: {problemId: null, points: [], chart: null, ids: new Set()},
  treeProblem: null,
  roofChart: null,
  feed: [],
  stream: null,
};

function showError(msg) {
  const b = $('error-banner');
  if (!msg) { b.hidden = true; return; }
  b.textContent = msg;
  b.hidden = false;
}

// ---- header ---------------------------------------------------------------------------------------

function renderHeader() {
  const r = S.run;
  if (!r) return;
  const meta = r.meta || {};
  const name = r.run_dir.replace(/\/+$/, '').split('/').pop();
  $('run-name').textContent = name;
  $('run-name').title = r.run_dir;
  const dev = r.device ? r.device.name : meta.device_name;
  $('run-device').textContent = [meta.backend, dev, r.finished ? 'finished' : 'running']
    .filter(Boolean).join(' · ');
  tickElapsed();
  $('h-rate').textContent = isNum(r.candidates_per_min) ? r.candidates_per_min.toFixed(1) : '–';
  $('h-rate').title = `${r.candidates_last_min ?? 0} in the last minute`;
  const skipped = r.problems_skipped || 0;
  $('h-done').textContent = `${r.problems_done} / ${r.problems_total - skipped}` +
    (skipped ? ` · ${skipped} skipped` : '');
  $('h-done').title = `${r.problems_with_winner} with a correct kernel` +
    (skipped ? `; ${skipped} not searched (the hot-op table says why)` : '');
  const e = r.speedup_e2e || {};
  $('h-speedup').replaceChildren(fmtX(e.value), e.basis === 'share'
    ? el('small', {text: `est., ${Math.round(100 * e.covered_share)} % of model`})
    : e.basis === 'op_geomean' ? el('small', {text: 'geomean of ops'}) : '');
  $('h-speedup').title = e.basis === 'share'
    ? 'Amdahl estimate: each problem\'s share of the model time runs at its best speedup'
    : 'no share of model time is known: geometric mean of the per-op speedups';
  $('h-candidates').textContent = String(r.candidates ?? 0);
  const waiting = r.waiting ? ` · ${r.waiting} waiting for the gate` : '';
  $('h-candidates').title = Object.entries(r.outcomes || {}).map(([k, v]) => `${k} ${v}`)
    .join(', ') + waiting;
}

function tickElapsed() {
  const r = S.run;
  if (!r) return;
  const extra = r.searching ? (Date.now() - S.fetchedAt) / 1000 : 0; // only while a search runs
  $('h-elapsed').textContent = fmtDuration(r.elapsed_s + extra);
}

async function loadRun() {
  S.run = await api('/api/run');
  S.fetchedAt = Date.now();
  renderHeader();
}

async function loadProblems() {
  const j = await api('/api/problems');
  S.problems = j.problems;
  S.byId = new Map(j.problems.map((p) => [p.id, p]));
  fillProblemSelects();
}

function fillProblemSelects() {
  for (const [id, withAll] of [['problem-select', false], ['failures-problem', true],
    ['roofline-problem', true]]) {
    const sel = $(id);
    const keep = sel.value;
    sel.replaceChildren(...(withAll ? [el('option', {value: '', text: 'all problems'})] : []),
      ...S.problems.map((p) => el('option', {value: p.id, text: p.name})));
    if (keep && [...sel.options].some((o) => o.value === keep)) sel.value = keep;
  }
}

// ---- hot-op table ---------------------------------------------------------------------------------

function hotRowValue(p, key) {
  switch (key) {
    case 'best_us': return p.best ? p.best.time_us : null;
    case 'sol_pct': return p.best ? p.best.sol_pct : null;
    case 'n_failed': {
      const o = p.outcomes || {};
      return Object.entries(o).reduce((a, [k, v]) => a + (k === 'ok' ? 0 : v), 0);
    }
    default: return p[key];
  }
}

function renderHotOps() {
  const {key, dir} = S.sort;
  const rows = [...S.problems].sort((a, b) => {
    const x = hotRowValue(a, key), y = hotRowValue(b, key);
    const xn = x === null || x === undefined, yn = y === null || y === undefined;
    if (xn || yn) return xn === yn ? a.id - b.id : xn ? 1 : -1; // unknown values last, always
    if (typeof x === 'string') return dir * x.localeCompare(y);
    return dir * (x - y) || a.id - b.id;
  });
  for (const th of document.querySelectorAll('#hot-ops th')) {
    th.classList.toggle('sorted-asc', th.dataset.key === key && dir > 0);
    th.classList.toggle('sorted-desc', th.dataset.key === key && dir < 0);
  }
  const body = document.querySelector('#hot-ops tbody');
  if (!rows.length) {
    body.replaceChildren(el('tr', {}, el('td', {colspan: 9, class: 'l empty',
      text: 'no problems in the store yet'})));
    return;
  }
  body.replaceChildren(...rows.map((p) => {
    const total = p.n_candidates || 0;
    const bar = el('span', {class: 'bar', title: Object.entries(p.outcomes || {})
      .map(([k, v]) => `${k}: ${v}`).concat(p.waiting ? [`waiting: ${p.waiting}`] : []).join(', ')});
    for (const o of OUTCOMES) {
      const n = o === 'waiting' ? p.waiting : (p.outcomes || {})[o];
      if (n > 0 && total > 0) {
        bar.append(el('span', {style: `width:${(100 * n) / total}%;background:${COLOURS[o]}`}));
      }
    }
    const speed = p.speedup;
    return el('tr', {class: 'clickable', 'data-problem': p.id,
      on: {click: () => { location.hash = `#/problem/${p.id}`; }}},
    el('td', {class: 'l'}, el('a', {href: `#/problem/${p.id}`, text: p.name}),
      p.skipped ? el('span', {class: 'skipped', text: ' skipped', title: p.skipped})
        : p.done ? el('span', {class: 'muted', text: ' ✓'}) : ''),
    el('td', {text: isNum(p.share) ? fmtPct(100 * p.share) : '–'}),
    el('td', {text: fmtUs(p.eager_us), title: (p.eager_source === 'reference'
      ? 'the reference\'s own time measured by the gate' : 'the reference\'s time at capture') +
      `; spread ${isNum(p.eager_spread_pct) ? `${p.eager_spread_pct.toFixed(1)} %` : 'not measured'}`}),
    el('td', {text: fmtUs(p.compile_us)}),
    el('td', {title: 'the winner: the incumbent when its verdict is ok, else the fastest ok candidate'},
      p.best ? candLink(p.best.candidate_id, fmtUs(p.best.time_us)) : '–'),
    el('td', {class: isNum(speed) ? (speed >= 1 ? 'good' : 'bad') : 'muted', text: fmtSpeedup(p),
      title: speedupTitle(p)}),
    el('td', {text: p.best ? fmtPct(p.best.sol_pct) : '–'}),
    el('td', {text: String(total)}),
    el('td', {class: 'l'}, bar));
  }));
}

function setupSorting() {
  for (const th of document.querySelectorAll('#hot-ops th')) {
    th.addEventListener('click', () => {
      const k = th.dataset.key;
      S.sort = S.sort.key === k ? {key: k, dir: -S.sort.dir} : {key: k, dir: k === 'name' ? 1 : -1};
      renderHotOps();
    });
  }
}

// ---- live feed ------------------------------------------------------------------------------------

function feedPush(item, fresh) {
  S.feed.unshift(item);
  if (S.feed.length > FEED_MAX) S.feed.length = FEED_MAX;
  const li = feedItem(item);
  if (fresh) li.classList.add('fresh');
  const ol = $('feed');
  ol.prepend(li);
  while (ol.children.length > FEED_MAX) ol.lastChild.remove();
}

function problemName(id) {
  const p = S.byId.get(id);
  return p ? p.name : id ? `problem ${id}` : 'run';
}

function feedItem(it) {
  const li = el('li', {'data-kind': it.kind});
  li.append(el('span', {class: 't', text: fmtClock(it.created_unix_s)}));
  if (it.kind === 'candidate') {
    li.dataset.candidate = it.id;
    li.append(el('span', {class: 'k', text: 'candidate'}), candLink(it.id),
      it.outcome ? badge(it.outcome) : '',
      el('span', {text: `${problemName(it.problem_id)} · ${it.agent}${it.draft ? ` · draft ${it.draft}` : ''}`}),
      el('span', {class: 'muted mono', text: it.params || ''}));
  } else if (it.kind === 'result') {
    li.dataset.candidate = it.candidate_id;
    li.append(el('span', {class: 'k', text: 'verdict'}), candLink(it.candidate_id), badge(it.outcome),
      el('span', {text: `${problemName(it.problem_id)}${isNum(it.time_us) ? ` · ${fmtUs(it.time_us)}` : ''}`}));
  } else {
    li.append(el('span', {class: 'k', text: it.event_kind}),
      el('span', {text: `${it.problem_id ? `${problemName(it.problem_id)}: ` : ''}${it.message}`}));
  }
  return li;
}

async function loadFeed() {
  const [ev, cands] = await Promise.all([api('/api/events?limit=30'), api('/api/candidates?limit=30')]);
  const items = [
    ...ev.items.map((e) => ({...e, event_kind: e.kind, kind: 'event'})),
    ...cands.items.map((c) => ({...c, kind: 'candidate'})),
  ].sort((a, b) => a.created_unix_s - b.created_unix_s);
  S.feed = [];
  $('feed').replaceChildren();
  for (const it of items) feedPush(it, false);
}

// ---- best-so-far curve ----------------------------------------------------------------------------

async function loadCurve(problemId) {
  const c = S.curve;
  if (c.problemId !== problemId) {
    c.problemId = problemId;
    c.points = [];
    c.ids = new Set();
  }
  let after = c.points.length ? c.points[c.points.length - 1].id : 0;
  for (;;) {
    const j = await api(`/api/problems/${problemId}/curve?after=${after}`);
    for (const p of j.points) addCurvePoint(p);
    if (j.next_after === null) break;
    after = j.next_after;
  }
  drawCurve();
}

function addCurvePoint(p) {
  const c = S.curve;
  if (c.ids.has(p.id)) return false;
  c.ids.add(p.id);
  c.points.push(p);
  return true;
}

function drawCurve() {
  const c = S.curve;
  const started = S.run ? S.run.started_unix_s : 0;
  const pts = [...c.points].sort((a, b) => a.id - b.id);
  const okTimes = pts.filter((p) => p.outcome === 'ok' && isNum(p.time_us)).map((p) => p.time_us);
  const logScale = okTimes.length > 0;
  const lane = logScale ? Math.max(...okTimes) * 2 : 1;
  const byOutcome = new Map();
  let best = Infinity;
  const steps = [];
  for (const p of pts) {
    const x = Math.max(0, p.created_unix_s - started);
    const ok = p.outcome === 'ok' && isNum(p.time_us);
    const point = {x, y: ok ? p.time_us : lane, cid: p.candidate_id, outcome: p.outcome,
      draft: p.draft, time: p.time_us, params: p.params, agent: p.agent};
    if (!byOutcome.has(p.outcome)) byOutcome.set(p.outcome, []);
    byOutcome.get(p.outcome).push(point);
    if (ok && p.time_us < best) {
      best = p.time_us;
      steps.push({x, y: best});
    }
  }
  if (steps.length && pts.length) {
    steps.push({x: Math.max(0, pts[pts.length - 1].created_unix_s - started), y: best});
  }
  const datasets = [{
    type: 'line', label: 'best so far', data: steps, stepped: 'after', borderColor: '#bc4c00',
    borderWidth: 2, pointRadius: 0, fill: false, order: 0,
  }];
  for (const o of OUTCOMES) {
    if (!byOutcome.has(o)) continue;
    datasets.push({
      type: 'scatter', label: o, data: byOutcome.get(o), backgroundColor: COLOURS[o],
      borderColor: COLOURS[o], order: 1,
      pointStyle: (ctx) => (ctx.raw && ctx.raw.draft ? 'rectRot' : o === 'ok' ? 'circle' : 'crossRot'),
      pointRadius: (ctx) => (ctx.raw && ctx.raw.draft ? 6 : o === 'ok' ? 4 : 6),
      borderWidth: o === 'ok' ? 1 : 2,
    });
  }
  const canvas = $('curve');
  canvas.dataset.points = String(pts.length);
  canvas.dataset.problem = String(c.problemId);
  if (c.chart) c.chart.destroy();
  c.chart = new Chart(canvas, {
    type: 'scatter',
    data: {datasets},
    options: {
      animation: false, maintainAspectRatio: false, parsing: false,
      scales: {
        x: {type: 'linear', min: 0, title: {display: true, text: 'time since the run started'},
          ticks: {callback: (v) => fmtDuration(v)}},
        y: logScale
          ? {type: 'logarithmic', max: lane * 1.4, ticks: {callback: logTick},
            title: {display: true, text: 'time (µs), lower is better'}}
          : {type: 'linear', min: 0, max: 2, ticks: {display: false},
            title: {display: true, text: 'no correct candidate yet'}},
      },
      plugins: {
        legend: {display: false},
        tooltip: {callbacks: {label: (ctx) => {
          const r = ctx.raw;
          if (r.cid === undefined) return `best so far ${fmtUs(r.y)}`;
          return `#${r.cid} ${r.outcome}${r.outcome === 'ok' ? ` ${fmtUs(r.time)}` : ''}` +
            `${r.draft ? ` (draft ${r.draft})` : ''} · ${r.agent} ${r.params || ''}`;
        }}},
      },
      onClick: (evt, elements) => {
        const e = elements && elements[0];
        if (!e) return;
        const r = c.chart.data.datasets[e.datasetIndex].data[e.index];
        if (r && r.cid !== undefined) location.hash = `#/candidate/${r.cid}`;
      },
    },
  });
  const counts = OUTCOMES.filter((o) => byOutcome.has(o)).map((o) =>
    el('span', {}, el('i', {style: `background:${COLOURS[o]}`}), `${o} ${byOutcome.get(o).length}`));
  $('curve-legend').replaceChildren(
    el('span', {}, el('i', {style: 'background:#bc4c00;border-radius:0;height:3px;vertical-align:3px'}),
      `best so far ${isFinite(best) ? fmtUs(best) : '–'}`), ...counts,
    el('span', {text: '◆ draft · ✕ failure (drawn along the top)'}));
}

// ---- search tree ----------------------------------------------------------------------------------

async function loadTree(problemId) {
  const j = await api(`/api/problems/${problemId}/tree`);
  S.treeProblem = problemId;
  drawTree(j);
}

function drawTree(t) {
  const box = $('tree-box');
  const nodes = new Map(t.nodes.map((n) => [n.id, {...n, kids: []}]));
  const roots = [];
  for (const n of nodes.values()) {
    const p = n.parent_id !== null ? nodes.get(n.parent_id) : null;
    if (p) p.kids.push(n);
    else roots.push(n);
  }
  if (t.source === 'candidates') {
    // a tree of candidates: a node's visits are the candidates below it (itself included)
    const count = (n) => { n.visits = 1 + n.kids.reduce((a, k) => a + count(k), 0); return n.visits; };
    roots.forEach(count);
  }
  roots.sort((a, b) => a.draft - b.draft || a.id - b.id);
  for (const n of nodes.values()) n.kids.sort((a, b) => a.id - b.id);
  const maxVisits = Math.max(1, ...[...nodes.values()].map((n) => n.visits || 0));
  const radius = (n) => 4 + 10 * Math.sqrt((n.visits || 0) / maxVisits);
  const SLOT = 26, LEVEL = 64, PAD = 30;
  let slot = 0, depthMax = 0;
  // leaves take the next slot; a parent sits over the middle of its children
  const place = (n, depth) => {
    n.depth = depth;
    depthMax = Math.max(depthMax, depth);
    if (!n.kids.length) n.slot = slot++;
    else {
      n.kids.forEach((k) => place(k, depth + 1));
      n.slot = (n.kids[0].slot + n.kids[n.kids.length - 1].slot) / 2;
    }
  };
  for (const r of roots) { place(r, 0); slot += 1; }
  const width = Math.max(box.clientWidth - 4, 2 * PAD + slot * SLOT);
  const height = 2 * PAD + depthMax * LEVEL + 20;
  const s = svg('svg', {width, height, viewBox: `0 0 ${width} ${height}`, role: 'img'});
  const xOf = (n) => PAD + n.slot * SLOT + SLOT / 2;
  const yOf = (n) => PAD + n.depth * LEVEL;
  const edges = svg('g');
  const dots = svg('g');
  const labels = svg('g');
  s.append(edges, dots, labels);
  const incumbent = t.incumbent_id;
  const visit = (n) => {
    for (const k of n.kids) {
      edges.append(svg('line', {x1: xOf(n), y1: yOf(n), x2: xOf(k), y2: yOf(k),
        class: k.draft ? 'draft' : null}));
      visit(k);
    }
    const isRoot = n.parent_id === null && n.candidate_id === null;
    const value = isNum(n.value) ? n.value : null;
    const c = svg('circle', {cx: xOf(n), cy: yOf(n), r: radius(n).toFixed(1),
      fill: isRoot ? '#ffffff' : valueColour(value),
      class: [isRoot ? 'root' : '', n.draft ? 'draft' : '',
        incumbent !== null && n.candidate_id === incumbent ? 'incumbent' : ''].join(' ').trim(),
      'data-node': n.id, 'data-candidate': n.candidate_id ?? undefined,
      'data-draft': n.draft, 'data-visits': n.visits});
    const title = svg('title');
    title.textContent = isRoot
      ? `${n.draft ? `draft ${n.draft} root` : 'root'} · visits ${n.visits} · best ${fmtNum(n.best)}`
      : `node ${n.id} · candidate #${n.candidate_id ?? '–'} · ${n.status}${n.outcome ? ` (${n.outcome})` : ''}` +
        `${isNum(n.time_us) ? ` ${fmtUs(n.time_us)}` : ''} · visits ${n.visits} · value ${fmtNum(value)}` +
        `${n.draft ? ` · draft ${n.draft}` : ''}\n${n.params || ''}`;
    c.append(title);
    if (n.candidate_id !== null && n.candidate_id !== undefined) {
      c.addEventListener('click', () => { location.hash = `#/candidate/${n.candidate_id}`; });
    }
    dots.append(c);
    if (isRoot || (n.draft && nodes.get(n.parent_id)?.draft !== n.draft)) {
      const lab = svg('text', {x: xOf(n) + radius(n) + 4, y: yOf(n) - radius(n) - 2});
      lab.textContent = n.draft ? `draft ${n.draft}` : (S.byId.get(t.problem_id)?.name || 'root');
      labels.append(lab);
    }
  };
  roots.forEach(visit);
  box.replaceChildren(nodes.size ? s : el('div', {class: 'empty', text: 'no search tree yet'}));
  const drafts = new Set([...nodes.values()].filter((n) => n.draft).map((n) => n.draft));
  $('tree-info').textContent = `${t.total} ${t.source === 'nodes' ? 'nodes' : 'candidates (no tree ' +
    'persisted: drawn by parent)'}` + `${drafts.size ? ` · ${drafts.size} draft${drafts.size > 1 ? 's' : ''}` : ''}` +
    `${t.truncated ? ` · showing the ${t.nodes.length} most visited` : ''}`;
}

// ---- problem view ---------------------------------------------------------------------------------

function renderProblemSummary(p) {
  const o = p.outcomes || {};
  const fails = Object.entries(o).filter(([k]) => k !== 'ok').reduce((a, [, v]) => a + v, 0);
  $('problem-summary').replaceChildren(
    `${p.n_candidates} candidates · ${o.ok || 0} ok · ${fails} failed · best `,
    p.best ? candLink(p.best.candidate_id, fmtUs(p.best.time_us)) : '–',
    ` · eager ${fmtUs(p.eager_us)} · speedup ${fmtSpeedup(p)} · SOL ${p.best ? fmtPct(p.best.sol_pct) : '–'}` +
    (p.skipped ? ` · skipped: ${p.skipped}` : ''));
}

async function showProblem(id) {
  if (!S.problems.length) await loadProblems();
  if (!id) id = S.problemId || (S.problems[0] && S.problems[0].id);
  if (!id) {
    $('problem-summary').textContent = 'no problems in the store yet';
    return;
  }
  if (!S.byId.get(id)) await loadProblems(); // a problem newer than the page
  const p = S.byId.get(id);
  if (!p) throw new Error(`no problem ${id}`);
  S.problemId = id;
  $('problem-select').value = String(id);
  $('crumb').textContent = p.name;
  renderProblemSummary(p);
  await Promise.all([loadCurve(id), loadTree(id)]);
}

// ---- candidate page -------------------------------------------------------------------------------

function highlighted(source, language) {
  const lines = source.replace(/\n$/, '').split('\n');
  const gutter = el('pre', {class: 'gutter', text: lines.map((_, i) => i + 1).join('\n')});
  const code = el('code', {class: 'hljs'});
  if (window.hljs) code.innerHTML = hljs.highlight('cpp', source.replace(/\n$/, ''), true).value;
  else code.textContent = source;
  return el('div', {class: 'code', 'data-testid': 'source', 'data-language': language},
    gutter, el('pre', {class: 'src'}, code));
}

// Line diff by longest common subsequence, after trimming the common head and tail; a middle too
// large for the table (over 4M cells) is shown as removed-then-added.
function lineDiff(a, b) {
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre &&
    a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const A = a.slice(pre, a.length - suf), B = b.slice(pre, b.length - suf);
  const ops = [];
  for (let i = 0; i < pre; i++) ops.push([' ', i, i]);
  if (A.length * B.length > 4e6) {
    A.forEach((_, i) => ops.push(['-', pre + i, null]));
    B.forEach((_, j) => ops.push(['+', null, pre + j]));
  } else {
    const n = A.length, m = B.length;
    const L = Array.from({length: n + 1}, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        L[i][j] = A[i] === B[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && A[i] === B[j]) { ops.push([' ', pre + i, pre + j]); i++; j++; }
      else if (j < m && (i === n || L[i][j + 1] >= L[i + 1][j])) { ops.push(['+', null, pre + j]); j++; }
      else { ops.push(['-', pre + i, null]); i++; }
    }
  }
  for (let k = 0; k < suf; k++) ops.push([' ', a.length - suf + k, b.length - suf + k]);
  return ops;
}

function diffView(parentSrc, src) {
  const a = parentSrc.replace(/\n$/, '').split('\n'), b = src.replace(/\n$/, '').split('\n');
  const ops = lineDiff(a, b);
  const changed = ops.map((o) => o[0] !== ' ');
  const near = (k) => { for (let d = -3; d <= 3; d++) if (changed[k + d]) return true; return false; };
  const rows = [];
  let added = 0, removed = 0, skipping = 0;
  const flush = () => {
    if (skipping) rows.push(el('tr', {class: 'skip'}, el('td', {class: 'n'}), el('td', {class: 'n'}),
      el('td', {class: 's'}), el('td', {text: `⋯ ${skipping} unchanged line${skipping > 1 ? 's' : ''}`})));
    skipping = 0;
  };
  ops.forEach((o, k) => {
    if (o[0] === '+') added++;
    if (o[0] === '-') removed++;
    if (o[0] === ' ' && !near(k)) { skipping++; return; }
    flush();
    rows.push(el('tr', {class: o[0] === '+' ? 'add' : o[0] === '-' ? 'del' : ''},
      el('td', {class: 'n', text: o[1] === null ? '' : o[1] + 1}),
      el('td', {class: 'n', text: o[2] === null ? '' : o[2] + 1}),
      el('td', {class: 's', text: o[0]}),
      el('td', {text: o[0] === '-' ? a[o[1]] : b[o[2]]})));
  });
  flush();
  return {node: el('div', {class: 'diff', 'data-testid': 'diff'}, el('table', {}, el('tbody', {}, rows))),
    added, removed};
}

function kv(pairs) {
  const dl = el('dl', {class: 'kv'});
  for (const [k, v] of pairs) {
    if (v === undefined) continue;
    dl.append(el('dt', {text: k}), el('dd', {}, v === null ? '–' : v));
  }
  return dl;
}

// The evidence of a failed verdict as people read it: what went wrong, where, by how much.
function evidenceView(outcome, ev) {
  if (!ev || typeof ev !== 'object') return el('div', {class: 'muted', text: 'no evidence stored'});
  const wrap = el('div', {class: 'evidence', 'data-testid': 'evidence', 'data-outcome': outcome});
  const pairs = [];
  const show = (k, label, f = (x) => x) => {
    if (ev[k] !== undefined && ev[k] !== null && k !== 'log') pairs.push([label || k, String(f(ev[k]))]);
  };
  if (outcome === 'mismatch' && ev.reason !== 'input_modified') {
    show('output');
    show('workload_index', 'workload');
    show('set'); show('set_kind', 'input set');
    show('max_abs_err', 'max-abs error', fmtNum);
    show('rel_l2_err', 'rel. L2 error', fmtNum);
    if (isNum(ev.n_bad)) pairs.push(['bad elements', `${ev.n_bad} of ${ev.n_elements}`]);
    show('first_bad_index', 'first bad index');
    if (ev.first_bad_value !== undefined) {
      pairs.push(['first bad value', `${fmtNum(+ev.first_bad_value, 6)} (expected ${fmtNum(+ev.first_bad_expected, 6)})`]);
    }
    if (ev.tolerance) {
      pairs.push(['tolerance', Object.entries(ev.tolerance).map(([k, v]) => `${k} ${v}`).join(', ')]);
    }
    if (ev.audit) pairs.push(['found by', 'the audit launch']);
  } else {
    for (const k of Object.keys(ev)) {
      const v = ev[k];
      if (k === 'log' || k === 'log_truncated') continue;
      pairs.push([k.replace(/_/g, ' '), typeof v === 'object' ? JSON.stringify(v) : String(v)]);
    }
  }
  if (pairs.length) wrap.append(kv(pairs));
  if (typeof ev.log === 'string' && ev.log) {
    wrap.append(el('pre', {class: 'log', text: ev.log + (ev.log_truncated ? '\n⋯ (cut: the candidate page has the whole log)' : '')}));
  }
  return wrap;
}

function timingTable(result) {
  const w = (result && result.workloads) || [];
  if (!w.length) return el('div', {class: 'muted', text: 'no workload was reached'});
  const t = el('table', {class: 'grid', 'data-testid': 'timing'});
  t.append(el('thead', {}, el('tr', {}, ...['workload', 'axes', 'median', 'min', 'max', 'spread', 'n',
    'GB/s', 'SOL %', 'score', 'max-abs err', 'rel. L2 err'].map((h, i) => el('th', {class: i < 2 ? 'l' : '', text: h})))));
  const tb = el('tbody');
  for (const x of w) {
    const tm = x.time_us || {};
    tb.append(el('tr', {},
      el('td', {class: 'l', text: x.index}),
      el('td', {class: 'l mono', text: Object.entries(x.axes || {}).map(([k, v]) => `${k}=${v}`).join(' ')}),
      el('td', {text: fmtUs(tm.median)}), el('td', {text: fmtUs(tm.min)}), el('td', {text: fmtUs(tm.max)}),
      el('td', {text: fmtPct(tm.spread_pct)}), el('td', {text: tm.n ?? '–'}),
      el('td', {text: fmtNum(x.gbps)}), el('td', {text: fmtPct(x.sol_pct)}),
      el('td', {text: fmtNum(x.sol_score)}), el('td', {text: fmtNum(x.max_abs_err)}),
      el('td', {text: fmtNum(x.rel_l2_err)})));
  }
  t.append(tb);
  return t;
}

async function showCandidate(id) {
  const view = $('view-candidate');
  view.replaceChildren(el('div', {class: 'empty', text: `loading candidate #${id}…`}));
  const c = await api(`/api/candidates/${id}`);
  if (!S.problems.length) await loadProblems();
  $('crumb').textContent = `candidate #${c.id}`;
  const last = c.results.length ? c.results[c.results.length - 1] : null;
  const r = last ? last.result || {} : {};
  const outcome = last ? last.outcome : 'waiting';
  const head = el('div', {class: 'cand-head'},
    el('h2', {text: `Candidate #${c.id}`}), badge(outcome),
    c.is_incumbent ? el('span', {class: 'badge', style: 'background:#bc4c00', text: 'incumbent'}) : '',
    c.draft ? el('span', {class: 'badge', style: 'background:#57606a', text: `draft ${c.draft}`}) : '',
    el('span', {}, 'of ', el('a', {href: `#/problem/${c.problem_id}`, text: c.problem})));
  const params = c.params ? c.params.split(/\s+/).filter(Boolean) : [];
  const left = el('div', {},
    el('h3', {text: 'Candidate'}),
    kv([
      ['agent', c.agent], ['family', c.family], ['params', params.length ? params.join('  ') : '(none)'],
      ['draft', c.draft ? `draft ${c.draft}` : 'main tree'],
      ['parent', c.parent_id ? candLink(c.parent_id) : 'root'],
      ['children', c.children.length ? el('span', {}, ...c.children.flatMap((k, i) =>
        [i ? ' ' : '', candLink(k.id)])) : 'none'],
      ['tree node', c.node_id ?? null], ['source hash', c.source_hash], ['binary hash', c.binary_hash],
      ['created', new Date(c.created_unix_s * 1000).toLocaleString()],
    ]));
  const summary = r.summary || {};
  const right = el('div', {},
    el('h3', {text: 'Verdict'}),
    kv([
      ['outcome', badge(outcome)],
      ['time (geomean of medians)', last ? fmtUs(last.time_us) : '–'],
      ['timing spread (worst workload)', last ? fmtPct(last.spread_pct) : '–'],
      ['SOL %', last ? fmtPct(last.sol_pct) : '–'],
      ['SOL score', last ? fmtNum(last.score) : '–'],
      ['workloads proved / timed', isNum(summary.workloads) ? `${summary.proved} / ${summary.timed} of ${summary.workloads}` : '–'],
      ['compile', isNum(r.compile_s) ? `${r.compile_s.toFixed(2)} s` : '–'],
      ['device', r.device ? `${r.device.name} (${fmtNum(r.device.ceiling_gbps)} GB/s, ${fmtNum(r.device.ceiling_gflops)} GFLOP/s)` : '–'],
      ['verdicts', String(c.results.length)],
    ]),
    outcome !== 'ok' && last ? el('div', {}, el('h3', {text: 'Evidence'}), evidenceView(outcome, r.evidence)) : '');
  view.replaceChildren(head, el('div', {class: 'cols'}, left, right));

  view.append(el('h3', {}, 'Timing and error statistics per workload',
    el('small', {text: 'median, spread (p90 − p10) / median, SOL %, error margin of the proof'})),
  timingTable(r));

  view.append(el('h3', {}, 'Source', el('small', {text: c.language === 'cuda' ? 'CUDA C' : 'C (cpu backend)'})),
    highlighted(c.source || '', c.language));
  if (c.parent && typeof c.parent.source === 'string') {
    const d = diffView(c.parent.source, c.source || '');
    view.append(el('h3', {}, 'Diff against its parent ', candLink(c.parent.id),
      el('small', {text: `+${d.added} −${d.removed} lines · parent params: ${c.parent.params || '(none)'}`})), d.node);
  } else {
    view.append(el('h3', {}, 'Diff against its parent', el('small', {text: 'none: a child of the root'})));
  }
  const llm = c.llm || [];
  if (llm.length) {
    view.append(el('h3', {}, 'The language model', el('small', {text: 'the exchange that made this kernel, and what was asked about it since'})));
    for (const x of llm) {
      const msgs = (x.request && Array.isArray(x.request.messages)) ? x.request.messages : [];
      view.append(el('details', {class: 'llm', 'data-testid': 'llm-exchange', 'data-status': x.status},
        el('summary', {},
          el('span', {text: x.role === 'made' ? 'made it' : 'asked about it'}), ' ', badge(x.status), ' ',
          el('span', {class: 'muted', text: `${x.model} · ${x.tokens} tokens · ${x.attempts} attempt(s)` +
            (isNum(x.latency_ms) ? ` · ${(x.latency_ms / 1000).toFixed(1)} s` : '') + (x.reason ? ` · ${x.reason}` : '')})),
        ...msgs.map((m) => el('div', {}, el('h4', {text: m.role}), el('pre', {class: 'log', text: String(m.content ?? '')}))),
        el('h4', {text: 'reply'}), el('pre', {class: 'log', text: x.reply ?? '(none)'}),
        x.truncated ? el('div', {class: 'muted', text: `cut at ${65536} characters`}) : ''));
    }
  }
  const log = c.compile_log || (r.evidence && r.evidence.log);
  view.append(el('h3', {text: 'Compile log'}),
    log ? el('pre', {class: 'log', 'data-testid': 'compile-log', text: log})
      : el('div', {class: 'muted', text: 'empty (the compiler said nothing)'}));
  if (c.results.length > 1) {
    view.append(el('h3', {}, 'Every verdict', el('small', {text: 're-timings of the incumbent add verdicts'})));
    const t = el('table', {class: 'grid'});
    t.append(el('tr', {}, ...['verdict', 'outcome', 'time', 'spread', 'SOL %', 'when'].map((h) => el('th', {text: h}))));
    for (const x of c.results) {
      t.append(el('tr', {}, el('td', {text: x.id}), el('td', {}, badge(x.outcome)), el('td', {text: fmtUs(x.time_us)}),
        el('td', {text: fmtPct(x.spread_pct)}), el('td', {text: fmtPct(x.sol_pct)}), el('td', {text: fmtClock(x.created_unix_s)})));
    }
    view.append(t);
  }
}

// ---- failures -------------------------------------------------------------------------------------

function failureItem(it) {
  return el('div', {class: 'failure', 'data-candidate': it.candidate_id},
    el('div', {class: 'line'}, candLink(it.candidate_id), el('span', {text: it.problem}),
      el('span', {class: 'muted', text: `${it.agent}${it.draft ? ` · draft ${it.draft}` : ''}`}),
      el('span', {class: 'mono muted', text: it.params || ''}),
      el('span', {class: 't muted', text: fmtClock(it.created_unix_s)})),
    evidenceView(it.outcome, it.evidence));
}

async function showFailures() {
  if (!S.problems.length) await loadProblems();
  $('crumb').textContent = '';
  const prob = $('failures-problem').value;
  const q = prob ? `?problem=${prob}` : '';
  const j = await api(`/api/failures${q}`);
  $('failures-summary').textContent = `${j.total} candidate${j.total === 1 ? '' : 's'} whose verdict is a failure`;
  const box = $('failure-groups');
  if (!j.groups.length) {
    box.replaceChildren(el('div', {class: 'empty', text: 'no failures: every verdict so far is ok'}));
    return;
  }
  box.replaceChildren(...j.groups.map((g) => {
    const list = el('div', {}, ...g.items.map(failureItem));
    const sec = el('section', {class: 'group', 'data-outcome': g.outcome},
      el('header', {}, badge(g.outcome), el('span', {class: 'count', text: `${g.count} candidate${g.count === 1 ? '' : 's'}`})),
      list);
    let next = g.next_before;
    if (next) {
      const more = el('button', {class: 'more', text: 'more'});
      more.addEventListener('click', async () => {
        const p = await api(`/api/failures?outcome=${g.outcome}&before=${next}&limit=20${prob ? `&problem=${prob}` : ''}`);
        const grp = p.groups[0];
        if (grp) grp.items.forEach((it) => list.append(failureItem(it)));
        next = grp ? grp.next_before : null;
        if (!next) more.remove();
      });
      sec.append(more);
    }
    return sec;
  }));
}

// ---- roofline -------------------------------------------------------------------------------------

async function showRoofline() {
  if (!S.problems.length) await loadProblems();
  $('crumb').textContent = '';
  const prob = $('roofline-problem').value;
  const j = await api(`/api/roofline${prob ? `?problem=${prob}` : ''}`);
  const canvas = $('roofline');
  canvas.dataset.points = String(j.points.length);
  const bw = j.ceilings.gbps, peak = j.ceilings.gflops;
  const known = j.points.filter((p) => isNum(p.flop_per_byte) && p.flop_per_byte > 0);
  // x is the arithmetic intensity when problems declare their flops (definition.json
  // "kiln": {"flops"}); memory-bound problems often do not, and then x is the bytes each workload
  // must move, with the copy-bandwidth roof (the one that bounds them) over it.
  const modeSel = $('roofline-x');
  if (!modeSel.dataset.touched) modeSel.value = known.length ? 'intensity' : 'bytes';
  const byBytes = modeSel.value === 'bytes';
  canvas.dataset.mode = modeSel.value;
  $('roofline-caption').textContent = `achieved GB/s against ${byBytes ? 'the bytes each workload moves'
    : 'arithmetic intensity'}, under the device's ceilings; a big point is a problem's fastest`;
  const ais = known.map((p) => p.flop_per_byte);
  const ridge = isNum(bw) && isNum(peak) ? peak / bw : 1;
  const sizes = j.points.map((p) => p.bytes);
  const xmin = byBytes ? Math.min(...sizes) / 2 : Math.min(0.01, ...ais.map((x) => x / 4), ridge / 1000);
  const xmax = byBytes ? Math.max(...sizes) * 2 : Math.max(ridge * 100, ...ais.map((x) => x * 4));
  // The roofs in GB/s: bandwidth below the ridge, peak FLOP/s over intensity above it.
  const roof = [];
  if (isNum(bw) && isFinite(xmin) && isFinite(xmax)) {
    for (let k = 0; k <= 60; k++) {
      const x = xmin * Math.pow(xmax / xmin, k / 60);
      roof.push({x, y: isNum(peak) && !byBytes ? Math.min(bw, peak / x) : bw});
    }
  }
  const problems = [...new Set(j.points.map((p) => p.problem_id))];
  const palette = ['#0969da', '#1a7f37', '#bc4c00', '#8250df', '#bf3989', '#cf222e', '#1b7c83', '#953800', '#6639ba', '#57606a'];
  const datasets = [];
  if (roof.length) {
    datasets.push({type: 'line', label: `ceiling: ${fmtNum(bw)} GB/s${isNum(peak) ? `, ${fmtNum(peak)} GFLOP/s` : ''}`,
      data: roof, borderColor: '#24292f', borderWidth: 2, pointRadius: 0, fill: false});
  }
  problems.forEach((pid, i) => {
    const pts = j.points.filter((p) => p.problem_id === pid).map((p) => ({
      x: byBytes ? p.bytes : isNum(p.flop_per_byte) && p.flop_per_byte > 0 ? p.flop_per_byte : xmin,
      y: p.gbps, p,
    }));
    datasets.push({type: 'scatter', label: S.byId.get(pid)?.name || `problem ${pid}`, data: pts,
      backgroundColor: palette[i % palette.length], borderColor: palette[i % palette.length],
      pointStyle: (ctx) => (byBytes || (ctx.raw && isNum(ctx.raw.p.flop_per_byte)) ? 'circle' : 'triangle'),
      pointRadius: (ctx) => (ctx.raw && ctx.raw.p.rank === 1 ? 7 : 4)});
  });
  if (S.roofChart) S.roofChart.destroy();
  S.roofChart = new Chart(canvas, {
    type: 'scatter', data: {datasets},
    options: {
      animation: false, maintainAspectRatio: false, parsing: false,
      scales: {
        x: {type: 'logarithmic', min: xmin, max: xmax, ticks: {callback: logTick},
          title: {display: true, text: byBytes ? 'bytes the workload must move (inputs read once, outputs written once)'
            : 'arithmetic intensity (flop / byte)'}},
        y: {type: 'logarithmic', ticks: {callback: logTick},
          title: {display: true, text: 'achieved GB/s (min bytes / time)'}},
      },
      plugins: {
        legend: {position: 'bottom'},
        tooltip: {callbacks: {label: (ctx) => {
          const p = ctx.raw.p;
          if (!p) return `ceiling ${fmtNum(ctx.raw.y)} GB/s`;
          return `${p.problem} #${p.candidate_id} workload ${p.workload_index}: ${fmtNum(p.gbps)} GB/s, ` +
            `${fmtUs(p.time_us)}, SOL ${fmtPct(p.sol_pct)}${isNum(p.flop_per_byte) ? '' : ' (flops not declared)'}`;
        }}},
      },
      onClick: (evt, elements) => {
        const e = elements && elements[0];
        if (!e) return;
        const r = S.roofChart.data.datasets[e.datasetIndex].data[e.index];
        if (r && r.p) location.hash = `#/candidate/${r.p.candidate_id}`;
      },
    },
  });
  $('roofline-summary').textContent = j.device
    ? `${j.device.name}: measured copy bandwidth ${fmtNum(bw)} GB/s, flops peak ${fmtNum(peak)} GFLOP/s (${j.ceilings.gflops_of || 'fp32 FMA (measured)'}), ridge at ${fmtNum(ridge)} flop/byte` +
      (j.n_without_flops && !byBytes ? ` · ${j.n_without_flops} points without declared flops drawn at the left edge (▲)` : '') +
      (byBytes && !known.length ? ' · no problem declares its flops: x is the bytes moved' : '')
    : 'no device measured yet';
  // per problem: the best candidate's bandwidth against the ceiling
  const t = $('roofline-table');
  t.replaceChildren(el('thead', {}, el('tr', {}, ...['problem', 'best candidate', 'workloads', 'best GB/s', '% of copy bandwidth', 'SOL % (geomean)']
    .map((h, i) => el('th', {class: i < 1 ? 'l' : '', text: h})))));
  const tb = el('tbody');
  for (const pid of problems) {
    const best = j.points.filter((p) => p.problem_id === pid && p.rank === 1);
    if (!best.length) continue;
    const top = Math.max(...best.map((p) => p.gbps));
    const sols = best.map((p) => p.sol_pct).filter((x) => isNum(x) && x > 0);
    const g = sols.length ? Math.exp(sols.reduce((a, x) => a + Math.log(x), 0) / sols.length) : null;
    tb.append(el('tr', {}, el('td', {class: 'l', text: best[0].problem}), el('td', {}, candLink(best[0].candidate_id)),
      el('td', {text: best.length}), el('td', {text: fmtNum(top)}), el('td', {text: isNum(bw) ? fmtPct((100 * top) / bw) : '–'}),
      el('td', {text: fmtPct(g)})));
  }
  t.append(tb);
}

// ---- routing --------------------------------------------------------------------------------------

function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [view, id] = h.split('/');
  const num = id !== undefined && /^\d+$/.test(id) ? Number(id) : null;
  switch (view) {
    case 'problem': return {view: 'problem', id: num};
    case 'candidate': return {view: 'candidate', id: num};
    case 'failures': return {view: 'failures'};
    case 'roofline': return {view: 'roofline'};
    default: return {view: 'overview'};
  }
}

async function route() {
  const {view, id} = parseHash();
  S.view = view;
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${view}`;
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.view === view);
  $('crumb').textContent = '';
  showError(null);
  try {
    if (view === 'overview') renderHotOps();
    else if (view === 'problem') await showProblem(id);
    else if (view === 'candidate') {
      if (id === null) throw new Error('no candidate id in the address');
      await showCandidate(id);
    } else if (view === 'failures') await showFailures();
    else if (view === 'roofline') await showRoofline();
    document.body.dataset.view = view;
  } catch (e) {
    showError(e.message);
    if (view === 'candidate') $('view-candidate').replaceChildren();
  }
}

// ---- live updates ---------------------------------------------------------------------------------

// Refreshes are coalesced: a burst of events costs one fetch per view per second at most.
const pending = new Set();
let refreshTimer = null;
function scheduleRefresh(what) {
  pending.add(what);
  if (!refreshTimer) refreshTimer = setTimeout(runRefresh, 400);
}

async function runRefresh() {
  const what = new Set(pending);
  pending.clear();
  try {
    if (what.has('reload')) {
      await Promise.all([loadRun(), loadProblems()]);
      await loadFeed();
      S.curve.problemId = null;
      await route();
    } else {
      if (what.has('run')) await loadRun();
      if (what.has('problems')) {
        await loadProblems();
        if (S.view === 'overview') renderHotOps();
        if (S.view === 'problem' && S.byId.get(S.problemId)) renderProblemSummary(S.byId.get(S.problemId));
      }
      if (what.has('tree') && S.view === 'problem' && S.problemId) await loadTree(S.problemId);
      if (what.has('curve') && S.view === 'problem' && S.curve.problemId === S.problemId) drawCurve();
      if (what.has('failures') && S.view === 'failures') await showFailures();
      if (what.has('roofline') && S.view === 'roofline') await showRoofline();
    }
  } catch (e) {
    showError(e.message);
  } finally {
    // the next refresh waits a second, whatever arrives meanwhile
    refreshTimer = setTimeout(() => {
      refreshTimer = null;
      if (pending.size) scheduleRefresh([...pending][0]);
    }, 1000);
  }
}

function connectStream() {
  if (!window.EventSource) return;
  const es = new EventSource(`/api/stream?since=${encodeURIComponent(S.run.stream_since)}`);
  S.stream = es;
  const live = $('live');
  const on = (yes) => {
    live.classList.toggle('on', yes);
    live.classList.toggle('off', !yes);
    live.textContent = yes ? 'live' : 'reconnecting';
  };
  const parse = (e) => { try { return JSON.parse(e.data); } catch (x) { return null; } };
  es.addEventListener('hello', () => on(true));
  es.addEventListener('open', () => on(true));
  es.addEventListener('error', () => on(false));
  es.addEventListener('candidate', (e) => {
    const c = parse(e);
    if (!c) return;
    feedPush({...c, kind: 'candidate'}, true);
    scheduleRefresh('run');
    scheduleRefresh('problems');
    if (S.view === 'problem' && c.problem_id === S.problemId) scheduleRefresh('tree');
  });
  es.addEventListener('result', (e) => {
    const r = parse(e);
    if (!r) return;
    feedPush({...r, kind: 'result'}, true);
    if (S.curve.problemId === r.problem_id && addCurvePoint(r)) scheduleRefresh('curve');
    scheduleRefresh('run');
    scheduleRefresh('problems');
    if (S.view === 'problem' && r.problem_id === S.problemId) scheduleRefresh('tree');
    if (r.outcome !== 'ok') scheduleRefresh('failures');
    else scheduleRefresh('roofline');
  });
  es.addEventListener('event', (e) => {
    const ev = parse(e);
    if (!ev) return;
    feedPush({...ev, event_kind: ev.kind, kind: 'event'}, true);
    scheduleRefresh('run');
    if (ev.kind === 'incumbent' || ev.kind === 'promote') scheduleRefresh('problems');
  });
  es.addEventListener('tree', (e) => {
    const t = parse(e);
    if (t && S.view === 'problem' && t.problem_ids.includes(S.problemId)) scheduleRefresh('tree');
  });
  es.addEventListener('reset', () => scheduleRefresh('reload'));
  es.addEventListener('store_error', (e) => {
    const x = parse(e);
    showError(`live feed: ${x ? x.error : 'the store cannot be read'}`);
  });
}

// ---- start ----------------------------------------------------------------------------------------

async function main() {
  setupSorting();
  $('problem-select').addEventListener('change', (e) => { location.hash = `#/problem/${e.target.value}`; });
  $('failures-problem').addEventListener('change', () => showFailures().catch((e) => showError(e.message)));
  $('roofline-problem').addEventListener('change', () => showRoofline().catch((e) => showError(e.message)));
  $('roofline-x').addEventListener('change', (e) => {
    e.target.dataset.touched = '1';
    showRoofline().catch((x) => showError(x.message));
  });
  window.addEventListener('hashchange', route);
  setInterval(tickElapsed, 1000);
  try {
    await loadRun();
    await loadProblems(); // the feed names problems
    await loadFeed();
  } catch (e) {
    showError(`cannot read the run: ${e.message}`);
    return;
  }
  await route();
  connectStream();
  document.body.dataset.ready = '1';
}

main();
