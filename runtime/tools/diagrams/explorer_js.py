"""The explorer's script and style sheet (inlined into every explorer page; the page's
content security policy allows exactly this script, by its hash).

A highlight never changes the width of a text (no bold face: the boxes were laid out for the
regular one); a highlighted text is coloured and outlined in its colour instead. The
legibility check measures every highlight (:data:`~.legibility.HIGHLIGHTS`)."""

from __future__ import annotations

__all__ = ["CSS", "SCRIPT"]

CSS = """
body { font-family: "DejaVu Sans", Arial, Helvetica, sans-serif; margin: 0; color: #222;
  background: #fff; }
header { padding: .5em 1em; border-bottom: 1px solid #ccc; display: flex; gap: 1em;
  align-items: center; flex-wrap: wrap; }
header h1 { font-size: 1.1em; margin: 0; }
main { display: flex; align-items: flex-start; }
#drawing { flex: 1 1 0; min-width: 0; overflow: auto; padding: .5em; max-height: 80vh; }
#panel { flex: 0 0 22em; padding: .5em 1em; border-left: 1px solid #ccc; font-size: .85em;
  max-height: 80vh; overflow: auto; }
#panel h2 { font-size: 1em; margin: .6em 0 .2em; }
#panel ul { margin: 0; padding-left: 1.2em; }
#timeline { border-top: 1px solid #ccc; padding: .5em 1em; font-size: .85em; }
#steps { max-height: 12em; overflow: auto; margin: .3em 0; padding-left: 2.5em; }
#steps li.current { background: #fff3b0; font-weight: bold; }
code { font-family: "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
.muted { color: #666; }
svg g.state, svg g.title { cursor: pointer; }
svg g.state:focus { outline: 2px solid #3a6ea5; }
svg.dim g.edge, svg.dim g.arc-label text, svg.dim g.state { opacity: .25; }
svg.dim g.edge.hl, svg.dim g.edge.step, svg.dim g.state.selected, svg.dim g.state.current,
svg.dim g.state.end, svg.dim g.state.match { opacity: 1; }
svg.dim g.arc-label text.hl, svg.dim g.arc-label text.step,
svg.dim g.arc-label text.match { opacity: 1; }
g.edge.hl path { stroke: #c0392b; stroke-width: 2.5; }
g.edge.hl polygon { stroke: #c0392b; fill: #c0392b; }
text.hl { fill: #c0392b; stroke: #c0392b; stroke-width: .4px; }
g.edge.step path { stroke: #1f6fd1; stroke-width: 3; }
g.edge.step polygon { stroke: #1f6fd1; fill: #1f6fd1; }
text.step { fill: #1f6fd1; stroke: #1f6fd1; stroke-width: .4px; }
g.state.selected > path, g.state.selected > polygon { stroke: #c0392b; stroke-width: 3; }
g.state.current > path, g.state.current > polygon { fill: #cfe3ff; stroke: #1f6fd1;
  stroke-width: 3; }
g.cluster.current > path, g.cluster.current > polygon { stroke: #1f6fd1; stroke-width: 3; }
g.cluster.selected > path, g.cluster.selected > polygon { stroke: #c0392b; stroke-width: 3; }
g.state.match > path, g.state.match > polygon { fill: #e3f4e3; }
text.match { fill: #2e7d32; stroke: #2e7d32; stroke-width: .4px; }
"""

SCRIPT = r"""
(() => {
  'use strict';
  const data = JSON.parse(document.getElementById('data').textContent);
  const svg = document.querySelector('#drawing svg');
  const panel = document.getElementById('panel');
  const byState = new Map(data.states.map(s => [s.id, s]));
  const el = (id) => document.getElementById(id);
  const part = ([id, line]) => {
    const g = el(id); if (!g) return null;
    if (line === null) return g;
    return g.querySelectorAll('text')[line] || null;
  };
  const node = (tag, text, attrs) => {
    const n = document.createElement(tag);
    if (text !== undefined) n.textContent = text;
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    return n;
  };
  const key = (t) => t.source + '|' + t.event + '|' + t.target;
  const clear = (cls) => { for (const e of document.querySelectorAll('.' + cls)) e.classList.remove(cls); };
  const mark = (t, cls) => { for (const p of t.parts) { const e = part(p); if (e) e.classList.add(cls); } };
  const describe = (t) => t.targetless
    ? `${t.source}: ${t.kind} ${t.event}${t.guard ? ' [' + t.guard + ']' : ''}`
    : `${t.source} → ${t.target} on ${t.event}${t.guard ? ' [' + t.guard + ']' : ''}`;
  const list = (title, items, cls) => {
    panel.appendChild(node('h2', `${title} (${items.length})`));
    const ul = node('ul', undefined, {class: cls});
    for (const t of items) ul.appendChild(node('li', describe(t), {'data-t': key(t)}));
    panel.appendChild(ul);
  };
  let selected = null;
  function reset() {
    selected = null;
    for (const c of ['hl', 'selected', 'end', 'match']) clear(c);
    svg.classList.remove('dim');
    panel.replaceChildren(node('p', 'Click a state (or Tab to it and press Enter) to see ' +
      'its transitions; choose an event; search; step through the run with ← and →.',
      {class: 'muted'}));
    document.getElementById('event').value = '';
  }
  function select(id) {
    reset();
    const s = byState.get(id); if (!s) return;
    selected = id;
    const g = el(s.el); if (g) g.classList.add('selected');
    const outgoing = data.transitions.filter(t => t.source === id && !t.targetless);
    const incoming = data.transitions.filter(t => t.target === id && !t.targetless);
    const stays = data.transitions.filter(t => t.source === id && t.targetless);
    for (const t of [...outgoing, ...incoming, ...stays]) {
      mark(t, 'hl');
      for (const end of [t.source, t.target]) {
        const e = byState.get(end); if (e && end !== id && el(e.el)) el(e.el).classList.add('end');
      }
    }
    svg.classList.add('dim');
    panel.replaceChildren(node('h2', `state ${id}` + (s.parent ? ` (in ${s.parent})` : '')));
    panel.firstChild.setAttribute('id', 'selection');
    list('outgoing', outgoing, 'outgoing');
    list('incoming', incoming, 'incoming');
    list('stays (ignores or handles in place)', stays, 'stays');
  }
  function filterEvent(event) {
    const keep = document.getElementById('event').value;
    reset(); document.getElementById('event').value = keep;
    if (!event) return;
    const ts = data.transitions.filter(t => t.event === event);
    for (const t of ts) {
      mark(t, 'hl');
      const s = byState.get(t.source); if (s && el(s.el)) el(s.el).classList.add('end');
    }
    svg.classList.add('dim');
    panel.replaceChildren(node('h2', `event ${event}`, {id: 'selection'}));
    list('transitions', ts, 'event');
  }
  function search(q) {
    clear('match');
    q = q.trim().toLowerCase(); if (!q) return;
    const found = [];
    for (const s of data.states) if (s.id.toLowerCase().includes(q)) {
      const g = el(s.el); if (g) g.classList.add('match'); found.push('state ' + s.id);
    }
    for (const t of data.transitions) if (t.event.toLowerCase().includes(q) ||
        (t.guard || '').toLowerCase().includes(q)) {
      mark(t, 'match'); found.push(describe(t));
    }
    panel.replaceChildren(node('h2', `search “${q}” (${found.length})`, {id: 'selection'}));
    const ul = node('ul', undefined, {class: 'found'});
    for (const f of found) ul.appendChild(node('li', f));
    panel.appendChild(ul);
  }
  // --- the trace timeline
  const records = data.trace ? data.trace.records : [];
  let at = -1;
  const byKey = new Map(data.transitions.map(t => [key(t), t]));
  function show() {
    clear('step'); clear('current');
    const items = document.querySelectorAll('#steps li');
    const pos = document.getElementById('position');
    if (at < 0) { pos.textContent = `before the first of ${records.length} transitions`;
      pos.setAttribute('data-at', '-1'); return; }
    const r = records[at];
    items[at].classList.add('current');
    items[at].scrollIntoView({block: 'nearest'});
    const t = byKey.get(key(r));
    if (t) mark(t, 'step');
    const s = byState.get(r.target);
    if (s && el(s.el)) el(s.el).classList.add('current');
    pos.textContent = `${at + 1} of ${records.length}: ${r.source} → ${r.target} on ${r.event}`;
    pos.setAttribute('data-at', String(at));
    pos.setAttribute('data-t', key(r));
  }
  const step = (d) => { if (!records.length) return;
    at = Math.max(-1, Math.min(records.length - 1, at + d)); show(); };
  if (records.length) {
    const ol = document.getElementById('steps');
    records.forEach((r, i) => {
      const li = node('li', `${r.instance} · ${r.event}: ${r.source} → ${r.target}`,
        {'data-t': key(r), 'data-i': String(i)});
      li.addEventListener('click', () => { at = i; show(); });
      ol.appendChild(li);
    });
    document.getElementById('prev').addEventListener('click', () => step(-1));
    document.getElementById('next').addEventListener('click', () => step(1));
    show();
  }
  // --- wiring: mouse and keyboard
  for (const s of data.states) {
    const targets = [el(s.el), s.title ? el(s.title) : null].filter(Boolean);
    for (const g of targets) {
      g.setAttribute('tabindex', '0'); g.setAttribute('role', 'button');
      g.setAttribute('aria-label', 'state ' + s.id);
      g.addEventListener('click', (e) => { e.stopPropagation(); select(s.id); });
      g.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); select(s.id); }
      });
    }
  }
  document.getElementById('event').addEventListener('change', (e) => filterEvent(e.target.value));
  document.getElementById('search').addEventListener('input', (e) => search(e.target.value));
  document.getElementById('clear').addEventListener('click', reset);
  document.addEventListener('keydown', (e) => {
    const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement;
    if (e.key === 'Escape') { reset(); document.getElementById('search').value = ''; return; }
    if (typing) return;
    if (e.key === '/') { e.preventDefault(); document.getElementById('search').focus(); }
    else if (e.key === 'ArrowRight' || e.key === 'n') step(1);
    else if (e.key === 'ArrowLeft' || e.key === 'p') step(-1);
    else if (e.key === 'Home') step(-records.length - 1);
    else if (e.key === 'End') step(records.length);
  });
  reset();
})();
"""
