// The operator's page. It reads the dashboard's JSON API (paths relative to the page, so it
// works under any mount point), follows the event stream, and writes every value with
// textContent: keys and principals are data, never markup.
'use strict';

const STATES = ['closed', 'open', 'half-open', 'disabled', 'metrics-only', 'forced-open'];
const LABEL = {
  closed: 'Closed', open: 'Open', 'half-open': 'Half-open', disabled: 'Disabled',
  'metrics-only': 'Metrics only', 'forced-open': 'Forced open',
};
const ACTIONS = {
  'force-open': 'Force open', disable: 'Disable', 'metrics-only': 'Metrics only',
  reset: 'Reset', clear: 'Clear override', auto: 'Let the rules decide',
};
const HELD_BY = {
  'run-time-key': 'set at run time on this key: Clear override lifts it',
  'run-time-dependency': 'set at run time on the whole dependency: clear it on the dependency',
  configuration: "held by the registry's configuration ([operator]): a reload without it lifts it, " +
    'or Let the rules decide overrides it at run time until cleared',
};
const SAMPLES = 30;          // sparkline points per breaker (slots of 10 s, from the server)
const REFRESH_MS = 2000;     // figures are polled; transitions arrive on the stream at once
const HISTORY_MS = 10000;    // the server closes a slot every 10 s

const ui = {
  token: sessionStorage.getItem('tripline.token') || '',
  session: null,
  filter: { dependency: '', state: '', q: '' },
  offset: 0,
  limit: 60,
  total: 0,
  cards: new Map(),          // id -> card element
  history: null,             // { id, at, body } of the breaker shown in the detail panel
  selected: null,            // id of the breaker shown in the detail panel
  stream: null,              // AbortController of the event stream
  armed: null,               // dependency-wide button waiting for its confirming click
  refreshTimer: null,
};

const $ = (id) => document.getElementById(id);

// Answers can come back in another order than their requests went (a slow one, a retry):
// each kind of request is numbered, and only the answer to the newest one is shown, so a late
// answer to an older listing never replaces the listing of the filter chosen since.
const asked = { session: 0, list: 0, detail: 0, incidents: 0, history: 0 };
function ask(kind) {
  const n = ++asked[kind];
  return () => asked[kind] === n;
}

// Characters nobody sees (zero-width, bidirectional controls, ...), shown as \u{...} so two
// names that differ by one never look the same. The server refuses them in keys; principal
// names come from the application and may still hold them.
const INVISIBLE = /[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8]|\ud82f[\udca0-\udca3]|\ud834[\udd73-\udd7a]|\udb40[\udc00-\udfff]|[\u0000-\u001f\u007f-\u009f]/g;
// Combining marks, and characters that normalization replaces (U+212B ANGSTROM SIGN), are
// also shown escaped in a text that is not in NFC: `cafe\u{301}` and `café` are two keys, and
// must not look like one. A mark that follows no letter or digit is escaped in any text.
const MARK = /\p{M}/u;
const LONE_MARKS = /(^|[^\p{L}\p{N}\p{M}])(\p{M}+)/gu;
const escaped = (c) => '\\u{' + c.codePointAt(0).toString(16) + '}';
function visible(text) {
  if (text === null || text === undefined) return text;
  const s = String(text).replace(INVISIBLE, escaped);
  if (s.normalize('NFC') !== s) {
    return Array.from(s, (c) => (MARK.test(c) || c.normalize('NFC') !== c ? escaped(c) : c)).join('');
  }
  return s.replace(LONE_MARKS, (_, before, marks) => before + Array.from(marks, escaped).join(''));
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function fmtDuration(ms) {
  if (!Number.isFinite(ms) || ms < 0) ms = 0;
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + (s % 60) + 's';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h ' + (m % 60) + 'm';
  return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
}

function fmtPct(x) {
  return (Math.round(x * 10) / 10) + '%';
}

function fmtCount(n) {
  return Number(n).toLocaleString('en');
}

function headers(extra) {
  const h = Object.assign({ Accept: 'application/json' }, extra || {});
  if (ui.token) h.Authorization = 'Bearer ' + ui.token;
  return h;
}

async function api(path, options) {
  const opts = Object.assign({ credentials: 'same-origin', headers: headers() }, options || {});
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    return { ok: false, status: 0, body: { error: 'the application did not answer' } };
  }
  let body = null;
  try { body = await res.json(); } catch (_) { body = null; }
  return { ok: res.ok, status: res.status, body };
}

// ---------------------------------------------------------------------------------------------
// Notices.

let noticeTimer = null;
// `what` a refusal answered: 'read' (the listing, a breaker, the session) or 'control'.
function notice(text, kind, status, what) {
  const n = $('notice');
  n.hidden = false;
  n.textContent = visible(text);
  n.className = 'notice ' + (kind || 'info');
  n.dataset.status = status === undefined ? '' : String(status);
  n.dataset.kind = kind || 'info';
  n.dataset.what = what || '';
  clearTimeout(noticeTimer);
  if (kind !== 'error') noticeTimer = setTimeout(() => { n.hidden = true; }, 6000);
}

// A refusal goes once what it refused works again: a refused read (any status: a token that
// may not read, a breaker gone, no answer at all) with the next read that works; a refused
// control stays said until the next control, or until other credentials are used (for a
// refusal they explain, 401 or 403). A read that works says nothing about a control.
function clearRefusal(what, statuses) {
  const n = $('notice');
  if (n.hidden || n.dataset.kind !== 'error' || n.dataset.what !== what) return;
  if (statuses && !statuses.includes(n.dataset.status)) return;
  n.hidden = true;
  n.dataset.status = '';
}

function refusal(r, what) {
  if (r.status === 0) return 'No answer: the application did not answer; the page tries again.';
  const why = (r.body && r.body.error) || ('status ' + r.status);
  const hint = r.status === 401 ? ' Enter a token that may ' + what + '.' : '';
  return 'Refused (' + r.status + '): ' + why + '.' + hint;
}

// ---------------------------------------------------------------------------------------------
// Session.

async function loadSession() {
  const newest = ask('session');
  const r = await api('api/session');
  if (!newest()) return;
  if (!r.ok) {
    ui.session = null;
    $('who').textContent = 'token refused';
    $('who').className = 'who bad';
    notice(refusal(r, 'read'), 'error', r.status, 'read');
    return;
  }
  ui.session = r.body;
  const who = $('who');
  if (r.body.anonymous) {
    who.textContent = 'anonymous';
    who.title = '';
    who.className = 'who';
  } else {
    who.textContent = visible(r.body.principal) + ' · ' + r.body.permissions.join(', ');
    who.title = who.textContent;
    who.className = 'who ok';
  }
  if (!r.body.anonymous || r.body.permissions.includes('read')) clearRefusal('read', ['401', '403']);
  document.body.dataset.controls = r.body.controls ? 'on' : 'off';
}

function may(permission) {
  return !!(ui.session && ui.session.permissions.includes(permission));
}

// ---------------------------------------------------------------------------------------------
// The grid.

function listQuery() {
  const p = new URLSearchParams();
  p.set('offset', String(ui.offset));
  p.set('limit', String(ui.limit));
  if (ui.filter.dependency) p.set('dependency', ui.filter.dependency);
  if (ui.filter.state) p.set('state', ui.filter.state);
  if (ui.filter.q) p.set('q', ui.filter.q);
  return 'api/breakers?' + p.toString();
}

async function refresh() {
  clearTimeout(ui.refreshTimer);
  ui.refreshTimer = null;
  const newest = ask('list');
  const r = await api(listQuery());
  if (!newest()) return;
  if (!r.ok) {
    if (r.status === 400) {
      notice(refusal(r, 'read'), 'error', r.status, 'read');
    } else {
      notice(refusal(r, 'read the breakers'), 'error', r.status, 'read');
    }
    return;
  }
  const list = r.body;
  ui.total = list.total;
  if (list.offset > 0 && list.offset >= list.total) {
    ui.offset = Math.max(0, Math.floor((list.total - 1) / ui.limit) * ui.limit);
    return refresh();
  }
  clearRefusal('read');
  renderTotals(list.states, list.all);
  renderDependencies(list.dependencies);
  renderGrid(list.breakers);
  renderPager(list);
  if (ui.selected) loadDetail(ui.selected);
  loadIncidents();
}

function soon() {
  if (!ui.refreshTimer) ui.refreshTimer = setTimeout(refresh, 250);
}

function renderTotals(states, all) {
  const box = $('totals');
  box.replaceChildren();
  box.append(el('span', 'chip all', fmtCount(all) + ' breakers'));
  for (const s of STATES) {
    if (!states[s]) continue;
    const c = el('button', 'chip s-' + s, fmtCount(states[s]) + ' ' + LABEL[s].toLowerCase());
    c.type = 'button';
    c.addEventListener('click', () => setFilter({ state: s }));
    box.append(c);
  }
}

function renderDependencies(deps) {
  const body = $('deps').tBodies[0];
  body.replaceChildren();
  // Troubled dependencies first; a long tail is reachable through the filter.
  const troubled = (d) => d.breakers - d.states.closed;
  const sorted = deps.slice().sort((a, b) => troubled(b) - troubled(a) || a.name.localeCompare(b.name));
  const shown = sorted.slice(0, 40);
  for (const d of shown) {
    const tr = el('tr');
    tr.dataset.dependency = d.name;
    const name = el('td', 'name');
    const b = el('button', 'link', visible(d.name));
    b.type = 'button';
    b.title = visible(d.name);
    b.addEventListener('click', () => setFilter({ dependency: d.name }));
    name.append(b);
    const bad = el('td');
    for (const s of STATES) {
      if (s === 'closed' || !d.states[s]) continue;
      bad.append(el('span', 'mini s-' + s, d.states[s] + ' ' + LABEL[s].toLowerCase()));
    }
    const rates = el('td', 'num rates', fmtRates(d.rates));
    const ov = el('td');
    if (d.override) ov.append(el('span', 'tag', d.override));
    tr.append(name, el('td', 'num', fmtCount(d.breakers)), bad, rates, ov);
    body.append(tr);
  }
  const more = $('deps-more');
  more.hidden = sorted.length <= shown.length;
  more.textContent = (sorted.length - shown.length) + ' more dependencies: use the filter.';
  // The filter lists every dependency.
  const sel = $('f-dep');
  const want = ui.filter.dependency;
  const names = deps.map((d) => d.name);
  const have = Array.from(sel.options).slice(1).map((o) => o.value);
  if (names.join('\n') !== have.join('\n')) {
    sel.replaceChildren(el('option', null, 'all dependencies'));
    sel.options[0].value = '';
    for (const d of deps) {
      const o = el('option', null, visible(d.name) + ' (' + fmtCount(d.breakers) + ')');
      o.value = d.name;
      sel.append(o);
    }
  }
  sel.value = want;
}

function keyLabel(b) {
  const dep = visible(b.dependency);
  if (b.redacted) return { dep, scope: 'sensitive scope', hidden: true };
  if (!b.scope) return { dep, scope: '', hidden: false };
  return { dep, scope: b.scope.kind + '=' + visible(b.scope.value), hidden: false };
}

function fmtRate(n) {
  if (n === null || n === undefined) return '–';
  return n >= 100 ? String(Math.round(n)) : String(Math.round(n * 10) / 10);
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return null;
  if (ms >= 1000) return (Math.round(ms / 100) / 10) + 's';
  if (ms >= 10) return Math.round(ms) + 'ms';
  return (Math.round(ms * 10) / 10) + 'ms';
}

// calls/s, rejections/s and p99 of the last 10 s.
function fmtRates(r) {
  if (!r) return '–';
  let t = fmtRate(r.calls_per_s) + '/s';
  if (r.rejected_per_s) t += ' · ' + fmtRate(r.rejected_per_s) + ' rej/s';
  const p99 = fmtMs(r.p99_ms);
  if (p99) t += ' · p99 ' + p99;
  return t;
}

function makeCard(b) {
  const card = el('article', 'card');
  card.tabIndex = 0;
  card.dataset.id = b.id;
  const head = el('header', 'card-head');
  head.append(el('span', 'dep'), el('span', 'scope'));
  const st = el('div', 'card-state');
  st.append(el('span', 'badge'), el('span', 'since'));
  const spark = svg('svg', { class: 'spark', viewBox: '0 0 120 32', preserveAspectRatio: 'none' });
  spark.append(
    svg('line', { class: 'thr', x1: 0, x2: 120, y1: 16, y2: 16 }),
    svg('polyline', { class: 'slow', points: '' }),
    svg('polyline', { class: 'fail', points: '' }),
  );
  const figs = el('div', 'figs');
  figs.append(el('span', 'f-fail'), el('span', 'f-slow'), el('span', 'f-calls'), el('span', 'f-rej'), el('span', 'f-p99'));
  const foot = el('div', 'card-foot');
  foot.append(el('span', 'tag override'), el('span', 'source'));
  card.append(head, st, spark, figs, foot);
  const open = () => select(b.id);
  card.addEventListener('click', open);
  card.addEventListener('keydown', (e) => { if (e.key === 'Enter') open(); });
  return card;
}

// The sparkline of one rate (`which`: 0 failures, 1 slow calls); slots without data are left out.
function points(series, which) {
  const step = 120 / (SAMPLES - 1);
  const start = 120 - step * (series.length - 1);
  const out = [];
  series.forEach((s, i) => {
    if (s === null) return;
    out.push((start + i * step).toFixed(1) + ',' + (30 - Math.min(100, s[which]) * 0.28).toFixed(1));
  });
  return out.join(' ');
}

function setCardState(card, state, sinceMs) {
  card.dataset.state = state;
  card.className = 'card s-' + state + (card.dataset.id === ui.selected ? ' selected' : '');
  card.querySelector('.badge').textContent = LABEL[state] || state;
  card._since = Date.now() - sinceMs;
  card.querySelector('.since').textContent = fmtDuration(sinceMs);
}

function updateCard(card, b) {
  const k = keyLabel(b);
  card.querySelector('.dep').textContent = k.dep;
  card.querySelector('.dep').title = k.dep;
  const scope = card.querySelector('.scope');
  scope.textContent = k.scope;
  scope.classList.toggle('hidden-scope', k.hidden);
  if (b.key) card.dataset.key = b.key; else delete card.dataset.key;
  card.dataset.dependency = b.dependency;
  setCardState(card, b.state, b.time_in_state_ms);
  const w = b.window;
  // The last five minutes from the server's history: the same after a reload.
  const series = (b.spark || []).slice(-SAMPLES);
  const known = series.filter((s) => s !== null);
  card.querySelector('polyline.fail').setAttribute('points', points(series, 0));
  card.querySelector('polyline.slow').setAttribute('points', points(series, 1));
  card.querySelector('.spark').dataset.points = String(known.length);
  const thr = 30 - Math.min(100, b.thresholds.failure_rate) * 0.28;
  const line = card.querySelector('line.thr');
  line.setAttribute('y1', thr.toFixed(1));
  line.setAttribute('y2', thr.toFixed(1));
  card.querySelector('.f-fail').textContent = 'fail ' + fmtPct(w.failure_rate);
  card.querySelector('.f-slow').textContent = 'slow ' + fmtPct(w.slow_rate);
  const r = b.rates;
  card.querySelector('.f-calls').textContent = r ? fmtRate(r.calls_per_s) + ' calls/s' : fmtCount(w.calls) + ' in window';
  card.querySelector('.f-rej').textContent = r ? fmtRate(r.rejected_per_s) + ' rej/s' : fmtCount(b.calls.rejected) + ' rejected';
  const p = card.querySelector('.f-p99');
  const p99 = r && fmtMs(r.p99_ms);
  p.textContent = p99 ? 'p50 ' + fmtMs(r.p50_ms) + ' · p99 ' + p99 : '';
  p.hidden = !p99;
  const ov = card.querySelector('.override');
  ov.textContent = b.override ? 'override: ' + b.override : '';
  ov.hidden = !b.override;
  card.querySelector('.source').textContent =
    b.reach === 'fleet' ? 'fleet-wide' : b.source === 'manual' ? 'registered by hand' : '';
  card.title = visible(b.key || b.dependency + ' (sensitive scope)') + ' · generation ' + b.generation;
}

function renderGrid(breakers) {
  const grid = $('grid');
  const seen = new Set();
  const order = [];
  for (const b of breakers) {
    let card = ui.cards.get(b.id);
    if (!card) {
      card = makeCard(b);
      ui.cards.set(b.id, card);
    }
    updateCard(card, b);
    seen.add(b.id);
    order.push(card);
  }
  for (const [id, card] of ui.cards) {
    if (!seen.has(id)) {
      card.remove();
      ui.cards.delete(id);
    }
  }
  grid.replaceChildren(...order);
  if (breakers.length === 0) grid.append(el('p', 'muted empty', 'No breaker matches.'));
}

function renderPager(list) {
  const from = list.total === 0 ? 0 : list.offset + 1;
  const to = Math.min(list.total, list.offset + list.breakers.length);
  $('pager-info').textContent = 'Showing ' + fmtCount(from) + '–' + fmtCount(to) + ' of ' + fmtCount(list.total);
  $('pager-info').dataset.total = String(list.total);
  $('prev').disabled = list.offset === 0;
  $('next').disabled = list.offset + ui.limit >= list.total;
}

function setFilter(change) {
  Object.assign(ui.filter, change);
  ui.offset = 0;
  $('f-dep').value = ui.filter.dependency;
  $('f-state').value = ui.filter.state;
  refresh();
}

// ---------------------------------------------------------------------------------------------
// One breaker.

function reasonText(reason, window) {
  if (!reason) return '';
  switch (reason.rule) {
    case 'failure-rate':
      return 'failure rate ' + fmtPct(window.failure_rate) + ' (' + window.failures + ' of ' + window.calls + ' calls)';
    case 'slow-call-rate':
      return 'slow-call rate ' + fmtPct(window.slow_rate) + ' (' + (window.slow_calls + window.in_flight_slow) + ' slow)';
    case 'consecutive-failures': return reason.count + ' failures in a row';
    case 'open-elapsed': return 'open wait elapsed';
    case 'probes-succeeded': return reason.probes + ' probes succeeded';
    case 'probes-failed': return (reason.failures + reason.slow) + ' of ' + reason.probes + ' probes failed or were slow';
    case 'half-open-timeout': return 'no verdict within the half-open wait';
    case 'operator': return 'operator';
    default: return reason.rule;
  }
}

function targetText(t) {
  if (!t) return '';
  if (t.key === undefined) return 'every breaker of ' + t.dependency;
  if (t.key === null) return visible(t.dependency) + ' (sensitive scope)';
  return visible(t.key);
}

function describe(ev) {
  switch (ev.kind) {
    case 'transition': {
      const why = reasonText(ev.reason, ev.window);
      const wait = ev.open_for_ms ? ', open for ' + fmtDuration(ev.open_for_ms) : '';
      return (LABEL[ev.from] || ev.from) + ' → ' + (LABEL[ev.to] || ev.to) + (why ? ': ' + why : '') + wait;
    }
    case 'would-trip': return 'would trip: ' + reasonText(ev.reason, ev.window);
    case 'reconfigured': return 'configuration replaced';
    case 'audit':
      return (ACTIONS[ev.action] || ev.action) + ' by ' + visible(ev.principal) + ' on ' + targetText(ev.target) +
        ' (' + ev.changed + ' changed' + (ev.in_force ? ', ' + ev.in_force + ' in force' : '') + ')';
    default: return ev.kind;
  }
}

function eventItem(ev, withKey) {
  const li = el('li', 'ev ev-' + ev.kind + (ev.to ? ' s-' + ev.to : ''));
  li.dataset.kind = ev.kind;
  const when = el('time', null, fmtDuration(ev.age_ms) + ' ago');
  if (ev.unix_ms) when.title = new Date(ev.unix_ms).toLocaleString();
  li.append(when);
  if (withKey && ev.kind !== 'audit') {
    const who = visible(ev.key || (ev.dependency + (ev.redacted ? ' (sensitive scope)' : '')));
    const name = el('strong', null, who);
    name.title = who;
    li.append(name);
  }
  li.append(el('span', null, describe(ev)));
  return li;
}

function select(id) {
  ui.selected = id;
  if (!ui.history || ui.history.id !== id) {
    ui.history = null;
    $('d-history').replaceChildren();
  }
  for (const [cid, card] of ui.cards) card.classList.toggle('selected', cid === id);
  loadDetail(id);
}

async function loadDetail(id) {
  const newest = ask('detail');
  const r = await api('api/breakers/' + encodeURIComponent(id));
  if (!newest() || ui.selected !== id) return;
  if (!r.ok) {
    if (r.status === 404) {
      $('detail').hidden = true;
      ui.selected = null;
    }
    notice(refusal(r, 'read the breakers'), 'error', r.status, 'read');
    return;
  }
  renderDetail(r.body);
}

function renderDetail(b) {
  const panel = $('detail');
  panel.hidden = false;
  panel.dataset.id = b.id;
  panel.dataset.state = b.state;
  const k = keyLabel(b);
  $('d-title').textContent = k.dep + (k.scope ? ' / ' + k.scope : '');
  $('d-title').title = $('d-title').textContent;
  const badge = $('d-badge');
  badge.textContent = LABEL[b.state];
  badge.className = 'badge s-' + b.state;
  $('d-since').textContent = 'for ' + fmtDuration(b.time_in_state_ms);
  const ov = $('d-override');
  ov.hidden = !b.override;
  ov.textContent = b.override ? 'override: ' + b.override : '';
  const held = $('d-held');
  held.hidden = !b.override_by;
  held.textContent = b.override_by ? (b.override || 'auto') + ': ' + HELD_BY[b.override_by] : '';
  held.dataset.layer = b.override_by || '';

  const figs = $('d-figs');
  figs.replaceChildren();
  const w = b.window;
  const t = b.thresholds;
  const r = b.rates;
  const rows = [
    ['last 10 s', r ? fmtRates(r) + (r.p50_ms !== null && r.p50_ms !== undefined ? ' · p50 ' + fmtMs(r.p50_ms) : '') : 'no slot closed yet'],
    ['failure rate', fmtPct(w.failure_rate) + ' (trips at ' + t.failure_rate + '%)'],
    ['slow-call rate', fmtPct(w.slow_rate) + ' (trips at ' + t.slow_call_rate + '%, slow after ' + fmtDuration(t.slow_call_ms) + ')'],
    ['window', fmtCount(w.calls) + ' calls, ' + fmtCount(w.failures) + ' failed, ' + fmtCount(w.slow_calls) + ' slow (minimum ' + t.minimum_calls + ')'],
    ['calls', fmtCount(b.calls.successful) + ' ok, ' + fmtCount(b.calls.failed) + ' failed, ' + fmtCount(b.calls.rejected) + ' rejected'],
    ['time open', fmtDuration(b.time_open_ms) + ' (half-open ' + fmtDuration(b.time_half_open_ms) + ')'],
    ['generation', b.generation + ' (' + b.transitions + ' transitions)'],
  ];
  for (const [name, value] of rows) figs.append(el('dt', null, name), el('dd', null, value));

  renderControls(b);
  renderTimeline(b);
  loadHistory(b.id);
  const list = $('d-events');
  list.replaceChildren();
  const events = b.events.slice().reverse();
  for (const ev of events) list.append(eventItem(ev, false));
  if (events.length === 0) list.append(el('li', 'muted', 'No transition recorded yet.'));
}

function actionButton(action, scope, target, label) {
  const button = el('button', 'act act-' + action, label);
  button.type = 'button';
  button.dataset.action = action;
  button.dataset.scope = scope;
  button.addEventListener('click', () => {
    if (scope === 'dependency' && ui.armed !== button) {
      // A dependency-wide action takes a second click to confirm.
      if (ui.armed) ui.armed.textContent = ui.armed.dataset.label;
      ui.armed = button;
      button.dataset.label = label;
      button.textContent = 'Confirm: ' + label.toLowerCase() + '?';
      setTimeout(() => {
        if (ui.armed === button) {
          ui.armed = null;
          button.textContent = label;
        }
      }, 5000);
      return;
    }
    if (ui.armed === button) {
      ui.armed = null;
      button.textContent = label;
    }
    control(action, target);
  });
  return button;
}

function renderControls(b) {
  const box = $('d-controls');
  box.hidden = !(ui.session && ui.session.controls);
  box.dataset.allowed = may('control') ? 'yes' : 'no';
  // Built once per breaker shown: a refresh must not drop a click, nor an armed confirmation.
  if (box.dataset.for === b.id) return;
  box.dataset.for = b.id;
  ui.armed = null;
  const keyActions = $('d-key-actions');
  const depActions = $('d-dep-actions');
  keyActions.replaceChildren();
  depActions.replaceChildren();
  for (const [action, label] of Object.entries(ACTIONS)) {
    keyActions.append(actionButton(action, 'key', { id: b.id }, label));
    depActions.append(actionButton(action, 'dependency', { dependency: b.dependency }, label + ' all'));
  }
  $('d-dep-title').textContent = 'Every breaker of ' + b.dependency;
}

function renderTimeline(b) {
  const tl = $('d-timeline');
  tl.replaceChildren();
  const transitions = b.events.filter((e) => e.kind === 'transition');
  const audits = b.events.filter((e) => e.kind === 'audit');
  const oldest = Math.max(60000, ...b.events.map((e) => e.age_ms));
  const span = Math.min(oldest * 1.05, 7 * 24 * 3600 * 1000);
  const x = (age) => 600 - (Math.min(age, span) / span) * 600;
  let from = transitions.length ? transitions[0].from : b.state;
  let start = span;
  for (const t of transitions) {
    tl.append(svg('rect', { class: 'seg s-' + from, x: x(start), y: 8, width: Math.max(0.5, x(t.age_ms) - x(start)), height: 22 }));
    from = t.to;
    start = t.age_ms;
  }
  tl.append(svg('rect', { class: 'seg s-' + b.state, x: x(start), y: 8, width: Math.max(0.5, 600 - x(start)), height: 22 }));
  for (const t of transitions) {
    const tick = svg('line', { class: 'tick', x1: x(t.age_ms), x2: x(t.age_ms), y1: 4, y2: 34 });
    const title = svg('title');
    title.textContent = describe(t);
    tick.append(title);
    tl.append(tick);
  }
  for (const a of audits) {
    const cx = x(a.age_ms);
    const mark = svg('path', { class: 'audit-mark', d: 'M' + cx + ' 46 l-5 -9 h10 z' });
    const title = svg('title');
    title.textContent = describe(a);
    mark.append(title);
    tl.append(mark);
  }
  $('d-tl-from').textContent = fmtDuration(span) + ' ago';
}

// ---------------------------------------------------------------------------------------------
// The last hour, from the server (so it is there after a reload, and from before the tab).

async function loadHistory(id) {
  const h = ui.history;
  if (h && h.id === id && Date.now() - h.at < HISTORY_MS) return;
  ui.history = { id, at: Date.now(), body: h && h.id === id ? h.body : null };
  const newest = ask('history');
  const r = await api('api/breakers/' + encodeURIComponent(id) + '/history');
  if (!newest()) return;
  if (ui.selected !== id || !r.ok) return;
  ui.history.body = r.body;
  renderHistory(r.body);
}

function renderHistory(h) {
  const chart = $('d-history');
  chart.replaceChildren();
  const n = h.slots;
  const w = 600 / n;
  let known = 0;
  // The state band: the most urgent state of each slot.
  h.state.forEach((s, i) => {
    if (s === null) return;
    known++;
    const rect = svg('rect', { class: 'seg s-' + s, x: (i * w).toFixed(2), y: 0, width: (w + 0.05).toFixed(2), height: 10 });
    chart.append(rect);
  });
  // Calls per second as bars, scaled to the hour's busiest slot.
  const peak = Math.max(1, ...h.calls_per_s.map((v) => v || 0), ...h.rejected_per_s.map((v) => v || 0));
  h.calls_per_s.forEach((v, i) => {
    if (!v) return;
    const height = (v / peak) * 40;
    chart.append(svg('rect', { class: 'calls', x: (i * w).toFixed(2), y: (54 - height).toFixed(2), width: (w + 0.05).toFixed(2), height: height.toFixed(2) }));
  });
  const line = (values, cls, scale) => {
    const pts = [];
    values.forEach((v, i) => {
      const y = 100 - Math.min(100, v * scale) * 0.42;
      if (v === null || v === undefined || !Number.isFinite(y)) return;
      pts.push(((i + 0.5) * w).toFixed(1) + ',' + y.toFixed(1));
    });
    if (pts.length) chart.append(svg('polyline', { class: cls, points: pts.join(' ') }));
  };
  line(h.failure_rate, 'fail', 1);
  line(h.slow_rate, 'slow', 1);
  line(h.rejection_rate, 'rej', 1);
  const p99 = h.p99_ms.filter((v) => v !== null && v !== undefined);
  if (p99.length) {
    const top = Math.max(...p99);
    line(h.p99_ms, 'p99', top > 0 ? 100 / top : 0);
    $('d-hist-p99').textContent = 'p99 up to ' + fmtMs(top);
  } else {
    $('d-hist-p99').textContent = '';
  }
  chart.dataset.known = String(known);
  $('d-hist-peak').textContent = 'peak ' + fmtRate(peak) + ' calls/s';
}

async function loadIncidents() {
  const newest = ask('incidents');
  const r = await api('api/incidents');
  if (!newest() || !r.ok) return;
  const list = $('incidents');
  list.replaceChildren();
  const all = r.body.incidents;
  $('incidents-panel').dataset.count = String(all.length);
  for (const i of all.slice().reverse()) {
    const li = el('li', 'ev s-' + i.state);
    li.dataset.id = i.id;
    li.append(el('time', null, fmtDuration(i.started_age_ms) + ' ago'));
    const who = visible(i.key || (i.dependency + ' (sensitive scope)'));
    const name = el('button', 'link', who);
    name.type = 'button';
    name.title = who;
    name.addEventListener('click', () => select(i.id));
    li.append(name);
    const why = i.reason ? reasonText(i.reason, i.window || {}) : 'already out of Closed when the dashboard began';
    let text = (LABEL[i.to] || i.to) + ': ' + why;
    if (i.trips > 1) text += ', tripped ' + i.trips + ' times';
    text += i.ended_age_ms === null ? ' · ' + (LABEL[i.state] || i.state) + ' now' : ' · closed ' + fmtDuration(i.ended_age_ms) + ' ago';
    li.append(el('span', null, text));
    list.append(li);
  }
  if (all.length === 0) list.append(el('li', 'muted', 'No breaker left Closed in the last hour.'));
}

// ---------------------------------------------------------------------------------------------
// Controls.

async function control(action, target) {
  if (!ui.session) await loadSession();
  const body = Object.assign({ action }, target);
  const r = await api('api/control', {
    method: 'POST',
    headers: headers({
      'Content-Type': 'application/json',
      'X-Tripline-CSRF': ui.session ? ui.session.csrf : '',
    }),
    body: JSON.stringify(body),
  });
  if (!r.ok) {
    notice(refusal(r, 'control breakers'), 'error', r.status, 'control');
    return;
  }
  const res = r.body;
  notice((ACTIONS[res.action] || res.action) + ' by ' + visible(res.principal) + ' on ' + targetText(res.target) +
    ': ' + res.changed + ' changed' + (res.in_force ? ', ' + res.in_force + ' in force' : ''), 'ok', 200);
  refresh();
}

// ---------------------------------------------------------------------------------------------
// The event stream (read with fetch, so the token goes in a header, never in a URL).

function setConn(text, live) {
  const c = $('conn');
  c.textContent = text;
  c.dataset.live = live ? 'true' : 'false';
}

function onEvent(type, data) {
  if (type === 'ready') {
    setConn('live', true);
    soon();
    return;
  }
  if (type === 'lagged') {
    soon();
    return;
  }
  let ev;
  try { ev = JSON.parse(data); } catch (_) { return; }
  const feed = $('feed');
  feed.prepend(eventItem(ev, true));
  while (feed.children.length > 30) feed.lastChild.remove();
  if (ev.kind === 'transition' && ev.id) {
    const card = ui.cards.get(ev.id);
    if (card) setCardState(card, ev.to, 0);
  }
  if (ui.selected && (ev.id === ui.selected || ev.kind === 'audit')) loadDetail(ui.selected);
  soon();
}

async function follow() {
  if (ui.stream) ui.stream.abort();
  const ctrl = new AbortController();
  ui.stream = ctrl;
  let wait = 500;
  while (!ctrl.signal.aborted) {
    try {
      const res = await fetch('api/events', {
        headers: headers({ Accept: 'text/event-stream' }),
        credentials: 'same-origin',
        signal: ctrl.signal,
      });
      if (!res.ok || !res.body) {
        setConn('stream refused (' + res.status + ')', false);
      } else {
        wait = 500;
        const reader = res.body.getReader();
        const decoder = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const chunk = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let type = 'message';
            const data = [];
            for (const line of chunk.split('\n')) {
              if (line.startsWith('event:')) type = line.slice(6).trim();
              else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
            }
            if (data.length || type !== 'message') onEvent(type, data.join('\n'));
          }
        }
        setConn('reconnecting…', false);
      }
    } catch (e) {
      if (ctrl.signal.aborted) return;
      setConn('reconnecting…', false);
    }
    await new Promise((done) => setTimeout(done, wait));
    wait = Math.min(wait * 2, 10000);
  }
}

// ---------------------------------------------------------------------------------------------
// Start.

function tick() {
  const now = Date.now();
  for (const card of ui.cards.values()) {
    if (card._since) card.querySelector('.since').textContent = fmtDuration(now - card._since);
  }
}

async function useToken(token) {
  ui.token = token;
  if (token) sessionStorage.setItem('tripline.token', token);
  else sessionStorage.removeItem('tripline.token');
  $('token').value = '';
  await loadSession();
  // Other credentials: a control they refused is no longer what they would answer.
  if (ui.session) clearRefusal('control', ['401', '403']);
  follow();
  refresh();
}

function start() {
  $('auth').addEventListener('submit', (e) => {
    e.preventDefault();
    useToken($('token').value.trim());
  });
  $('token-forget').addEventListener('click', () => useToken(''));
  $('f-dep').addEventListener('change', (e) => setFilter({ dependency: e.target.value }));
  $('f-state').addEventListener('change', (e) => setFilter({ state: e.target.value }));
  let typing = null;
  $('f-q').addEventListener('input', (e) => {
    clearTimeout(typing);
    typing = setTimeout(() => setFilter({ q: e.target.value.trim() }), 250);
  });
  $('f-limit').addEventListener('change', (e) => {
    ui.limit = Number(e.target.value);
    ui.offset = 0;
    refresh();
  });
  $('prev').addEventListener('click', () => { ui.offset = Math.max(0, ui.offset - ui.limit); refresh(); });
  $('next').addEventListener('click', () => { ui.offset += ui.limit; refresh(); });
  $('d-close').addEventListener('click', () => {
    ui.selected = null;
    $('detail').hidden = true;
    for (const card of ui.cards.values()) card.classList.remove('selected');
  });
  setInterval(tick, 1000);
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  loadSession().then(() => { follow(); refresh(); });
}

start();
