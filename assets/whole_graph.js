/* The Communities page's whole graph: every clone of a model drawn with the Canvas 2D API (issue 47, item 2).
 *
 * Dash serves this file from assets/. The page's clientside callbacks call
 * window.dash_clientside.whole_graph.draw(data, marked, shown, path, selectedRows, containerId, clickedId) when the
 * drawn data (a dcc.Store filled by app/pages/community/whole_graph.py), the marked clones, the filter's clones
 * (shown: the clones and the transitions among them; null: all), a searched word's clone path or the clone table's
 * selected row change, and .fit(clicks, containerId) for the "Fit" button. The renderer lives on its container element (container.wholeGraph), one per page.
 *
 * How it stays fast without a GPU (bench/bench_whole_graph.py, bench/RESULTS.md):
 * - the full scene (transitions, clones, labels) is drawn once into an offscreen canvas larger than the view by a
 *   margin on every side, clones batched by colour (one path and one fill per colour);
 * - panning only copies that bitmap, shifted (one drawImage a frame, whatever the number of clones); the scene is
 *   drawn again when the view leaves the cached area, and after the drag when it used up half the margin;
 * - zooming scales the cached bitmap at once and draws the full detail again 120 ms after the last wheel step.
 * Hover and click find the nearest clone through a uniform grid built once per data. A click writes
 * {clone, module, label, count} into a dcc.Store (dash_clientside.set_props), which the page's navigation reads.
 * Plain ES2017, no build step, no dependency.
 */
(function () {
  'use strict';

  const MARGIN_SHARE = 0.5;   // the cached scene's margin on each side, as a share of the view's longer side
  const MAX_MARGIN = 800;     // ... at most this many CSS pixels (the cache's memory grows with its area)
  const ZOOM_SETTLE_MS = 120; // the full redraw after the last wheel step
  const HOVER_PX = 6;         // a pointer this close to a clone (CSS pixels) hovers or clicks it
  const CLICK_SLOP_PX = 4;    // a press that moved less than this is a click, not a drag
  const MAX_CLONE_LABELS = 400; // clone labels are written when at most this many clones are in view
  const BACKGROUND = '#ffffff';
  const EDGE_RGB = '110, 110, 110';
  const ARROWS_ZOOM = 3;        // arrowheads on the transitions from this many times the fit's zoom ...
  const MAX_ARROWS = 3000;      // ... when at most this many transitions are drawn
  const PATH_COLOUR = '#b2182b';  // a searched word's clone path
  const SELECTED_COLOUR = '#ff7f00';  // the clone selected in the clone table (or clicked)
  const WEIGHT_BANDS = [0.1, 0.3, 0.6, Infinity];  // T's bands, each drawn wider, once arrowheads are drawn
  const MAX_WEIGHT_LABELS = 200;  // T is written on the transitions when at most this many are in view, zoomed in
  const LABEL_CELL = 6;  // labels are placed on a grid of this many CSS pixels: one that would overlap is left out

  /** The renderer of one container: a canvas, a tooltip, the data and the view's transform. */
  class WholeGraph {
    constructor(container, clickedId) {
      this.container = container;
      this.clickedId = clickedId;
      this.canvas = document.createElement('canvas');
      this.canvas.style.cssText = 'display:block;width:100%;height:100%;cursor:grab;touch-action:none;';
      this.tip = document.createElement('div');
      this.tip.className = 'whole-graph-tip';
      this.tip.style.cssText = 'position:absolute;pointer-events:none;display:none;background:rgba(255,255,255,0.95);'
        + 'border:1px solid #999;border-radius:3px;padding:2px 6px;font:12px sans-serif;white-space:nowrap;z-index:2;';
      container.replaceChildren(this.canvas, this.tip);
      this.cache = document.createElement('canvas');
      this.view = {s: 1, ox: 0, oy: 0};  // screen = s * world + o (CSS pixels from the canvas's top left)
      this.cacheView = null;             // the view the cache was drawn at (null: no cache)
      this.width = 0; this.height = 0; this.dpr = 1; this.margin = 0;
      this.n = 0; this.edges = 0; this.marked = null; this.markedCount = 0;
      this.shown = null; this.shownCount = 0;  // the filter's clones (null: every clone)
      this.path = null;  // a searched word's clones, in order (null: none)
      this.selected = -1;  // the clone selected in the clone table (-1: none)
      this.labelsDrawn = 0; this.weightsDrawn = 0;  // labels written at the last full draw (tests read them)
      this.draws = 0;          // full scene draws so far (tests and benchmarks read it)
      this.frames = 0;         // frames presented so far
      this.lastDrawMs = 0;     // the last full scene draw's time
      this.clicks = 0;
      this.drag = null; this.frame = 0; this.settle = 0; this.hoverAt = null;
      this.bind();
      this.resize();
      if (window.ResizeObserver) {
        this.observer = new ResizeObserver(() => { if (this.resize()) { this.drawScene(); this.present(); } });
        this.observer.observe(container);
      }
    }

    /** Read the data of the store: columns per clone, groups (hover text, colour, top module), transitions; the
     * caller then calls fit() to draw. */
    setData(data) {
      const n = data.x.length, x = new Float64Array(data.x), y = new Float64Array(data.y);
      const group = Int32Array.from(data.group), groups = data.groups;
      // colours: the groups' (modules or symbols), or those of an attribute's groups (colour_group, colours)
      const byAttribute = Array.isArray(data.colour_group) && Array.isArray(data.colours);
      const colourOf = byAttribute ? Int32Array.from(data.colour_group) : group;
      const paint = byAttribute ? data.colours : groups.colour;
      const colours = [], colourIndex = new Map(), groupColour = new Int32Array(paint.length);
      paint.forEach((c, g) => {
        if (!colourIndex.has(c)) { colourIndex.set(c, colours.length); colours.push(c); }
        groupColour[g] = colourIndex.get(c);
      });
      const byColour = colours.map(() => []);  // clone indices per colour: one fill per colour
      for (let i = 0; i < n; i++) byColour[groupColour[colourOf[i]]].push(i);
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      for (let i = 0; i < n; i++) {
        if (x[i] < x0) x0 = x[i]; if (x[i] > x1) x1 = x[i];
        if (y[i] < y0) y0 = y[i]; if (y[i] > y1) y1 = y[i];
      }
      if (!(x1 >= x0)) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; }
      Object.assign(this, {
        n: n, x: x, y: y, group: group, groups: groups, colours: colours,
        byColour: byColour.map(list => Int32Array.from(list)),
        source: Int32Array.from(data.source || []), target: Int32Array.from(data.target || []),
        weight: Float32Array.from(data.weight || []),
        labels: data.labels || [], moduleLabels: data.module_labels || [],
        sizes: Array.isArray(data.sizes) ? Float32Array.from(data.sizes) : null,  // size factors per clone
        bounds: {x0: x0, x1: Math.max(x1, x0 + 1e-9), y0: y0, y1: Math.max(y1, y0 + 1e-9)},
      });
      this.edges = this.source.length;
      this.allSource = this.source; this.allTarget = this.target; this.allWeight = this.weight;
      this.marked = null; this.markedCount = 0;
      this.shown = null; this.shownCount = n;
      this.buildGrid();
    }

    /** Show only the filter's clones and the transitions among them ({clones, source, target}); null: all. */
    setShown(shown) {
      if (!shown || !shown.clones) {
        this.shown = null; this.shownCount = this.n;
        this.source = this.allSource; this.target = this.allTarget; this.weight = this.allWeight;
      } else {
        this.shown = new Uint8Array(this.n);
        for (const i of shown.clones) if (i >= 0 && i < this.n) this.shown[i] = 1;
        this.shownCount = this.shown.reduce((a, b) => a + b, 0);
        this.source = Int32Array.from(shown.source || []); this.target = Int32Array.from(shown.target || []);
        this.weight = Float32Array.from(shown.weight || []);
      }
      this.edges = this.source.length;
    }

    /** Mark a searched word's clone path (its clones in order; null or [] marks none). */
    setPath(path) {
      const clones = path && Array.isArray(path.clones) ? path.clones.filter(i => i >= 0 && i < this.n) : [];
      this.path = clones.length ? Int32Array.from(clones) : null;
    }

    /** Select the clone of the clone table's selected row (its "state"; none: -1); true when it changed. */
    setSelected(rows) {
      const row = Array.isArray(rows) && rows.length ? rows[0] : null;
      const i = row && Number.isInteger(row.state) && row.state >= 0 && row.state < this.n ? row.state : -1;
      const changed = i !== this.selected;
      this.selected = i;
      return changed;
    }

    /** Bring the selected clone into view (the zoom kept) when it lies outside it. */
    showSelected() {
      const i = this.selected;
      if (i < 0 || !this.width || !this.height) return;
      const [px, py] = this.screenOf(i);
      if (px >= 0 && py >= 0 && px <= this.width && py <= this.height) return;
      this.view = {s: this.view.s, ox: this.width / 2 - this.view.s * this.x[i], oy: this.height / 2 - this.view.s * this.y[i]};
    }

    /** Whether clone i is drawn (the filter keeps it). */
    isShown(i) { return this.shown === null || this.shown[i] === 1; }

    /** Mark the clones of a module (the others faded); null or [] marks none. */
    setMarked(marked) {
      this.marked = new Uint8Array(this.n);
      this.markedCount = 0;
      for (const i of marked || []) if (i >= 0 && i < this.n && !this.marked[i]) { this.marked[i] = 1; this.markedCount++; }
    }

    /** A uniform grid over the clones' bounds, about two clones a cell: cellStart (prefix sums) and cellItems. */
    buildGrid() {
      const b = this.bounds, w = b.x1 - b.x0, h = b.y1 - b.y0, cells = Math.max(1, this.n / 2);
      const cols = Math.max(1, Math.ceil(Math.sqrt(cells * w / h))), rows = Math.max(1, Math.ceil(cells / cols));
      const start = new Int32Array(cols * rows + 1), cellOf = new Int32Array(this.n);
      for (let i = 0; i < this.n; i++) {
        const c = Math.min(cols - 1, Math.floor((this.x[i] - b.x0) / w * cols));
        const r = Math.min(rows - 1, Math.floor((this.y[i] - b.y0) / h * rows));
        cellOf[i] = r * cols + c; start[cellOf[i] + 1]++;
      }
      for (let k = 0; k < cols * rows; k++) start[k + 1] += start[k];
      const fill = start.slice(0, cols * rows), items = new Int32Array(this.n);
      for (let i = 0; i < this.n; i++) items[fill[cellOf[i]]++] = i;
      this.grid = {cols: cols, rows: rows, start: start, items: items, cw: w / cols, ch: h / rows};
    }

    /** The clone nearest to the screen point (px, py) within HOVER_PX (or the clone's own size), else -1. */
    nearest(px, py) {
      if (!this.n) return -1;
      const v = this.view, g = this.grid, b = this.bounds;
      const wx = (px - v.ox) / v.s, wy = (py - v.oy) / v.s, reach = Math.max(HOVER_PX, this.size()) / v.s;
      const c0 = Math.max(0, Math.floor((wx - reach - b.x0) / g.cw)), c1 = Math.min(g.cols - 1, Math.floor((wx + reach - b.x0) / g.cw));
      const r0 = Math.max(0, Math.floor((wy - reach - b.y0) / g.ch)), r1 = Math.min(g.rows - 1, Math.floor((wy + reach - b.y0) / g.ch));
      let best = -1, bestD = reach * reach;
      for (let r = r0; r <= r1; r++) {
        for (let c = c0; c <= c1; c++) {
          const k = r * g.cols + c;
          for (let j = g.start[k]; j < g.start[k + 1]; j++) {
            const i = g.items[j], dx = this.x[i] - wx, dy = this.y[i] - wy, d = dx * dx + dy * dy;
            if (!this.isShown(i)) continue;
            if (d <= bestD) { bestD = d; best = i; }
          }
        }
      }
      return best;
    }

    /** The side of a clone's square (CSS pixels) at the current zoom: about half the clones' mean spacing. */
    size() {
      const b = this.bounds, spacing = this.view.s * Math.sqrt((b.x1 - b.x0) * (b.y1 - b.y0) / Math.max(1, this.n));
      return Math.min(10, Math.max(2, 0.55 * spacing));
    }

    /** A clone's position on screen (CSS pixels from the canvas's top left). */
    screenOf(i) { return [this.view.s * this.x[i] + this.view.ox, this.view.s * this.y[i] + this.view.oy]; }

    /** The canvas's size from its container (device pixels by devicePixelRatio); true when it changed. */
    resize() {
      const w = this.container.clientWidth, h = this.container.clientHeight, dpr = window.devicePixelRatio || 1;
      if (w === this.width && h === this.height && dpr === this.dpr) return false;
      this.width = w; this.height = h; this.dpr = dpr;
      this.canvas.width = Math.max(1, Math.round(w * dpr)); this.canvas.height = Math.max(1, Math.round(h * dpr));
      this.margin = Math.min(MAX_MARGIN, Math.round(MARGIN_SHARE * Math.max(w, h)));
      if (!this.fitScale && this.n && w > 0 && h > 0) { this.fit(); return false; }  // data came before a size
      return w > 0 && h > 0;
    }

    /** The bounds of the clones shown (all, or the filter's, at least a hundredth of the whole's side). */
    shownBounds() {
      if (this.shown === null || this.shownCount === 0) return this.bounds;
      let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      for (let i = 0; i < this.n; i++) {
        if (!this.shown[i]) continue;
        if (this.x[i] < x0) x0 = this.x[i]; if (this.x[i] > x1) x1 = this.x[i];
        if (this.y[i] < y0) y0 = this.y[i]; if (this.y[i] > y1) y1 = this.y[i];
      }
      const b = this.bounds, pad = 0.01 * Math.max(b.x1 - b.x0, b.y1 - b.y0);
      return {x0: x0 - pad, x1: x1 + pad, y0: y0 - pad, y1: y1 + pad};
    }

    /** The view that shows every clone shown, centred, and a full draw of it. */
    fit() {
      const b = this.shownBounds(), w = this.width, h = this.height;
      this.fitScale = 0;
      if (!b || !w || !h) return;  // no size yet: resize() fits once there is one
      const s = 0.96 * Math.min(w / (b.x1 - b.x0), h / (b.y1 - b.y0));
      this.view = {s: s, ox: (w - s * (b.x0 + b.x1)) / 2, oy: (h - s * (b.y0 + b.y1)) / 2};
      this.fitScale = s;
      this.drawScene();
      this.present();
    }

    /** Draw the full scene at the current view into the cache: the view plus its margin on each side. */
    drawScene() {
      if (!this.width || !this.height || !this.n) { this.cacheView = null; return; }
      const t0 = performance.now(), m = this.margin, dpr = this.dpr, v = this.view;
      const cw = this.width + 2 * m, ch = this.height + 2 * m;
      if (this.cache.width !== Math.round(cw * dpr) || this.cache.height !== Math.round(ch * dpr)) {
        this.cache.width = Math.round(cw * dpr); this.cache.height = Math.round(ch * dpr);
      }
      const ctx = this.cache.getContext('2d', {alpha: false});
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.fillStyle = BACKGROUND;
      ctx.fillRect(0, 0, cw, ch);
      const s = v.s, ox = v.ox + m, oy = v.oy + m, x = this.x, y = this.y;  // cache pixel = s * world + o
      // the transitions: one path, faint, fainter the more there are; a segment wholly on one side of the cache
      // is left out
      // zoomed in far enough (arrowheads drawn), each transition is as wide as its T's band
      const zoomed = s >= ARROWS_ZOOM * this.fitScale && this.edges <= MAX_ARROWS;
      const weighted = zoomed && this.weight.length === this.edges;
      const space = new LabelSpace();
      this.labelsDrawn = 0; this.weightsDrawn = 0;
      if (this.edges) {
        const bands = weighted ? WEIGHT_BANDS : [Infinity];
        bands.forEach((upper, k) => {
          const lower = k ? bands[k - 1] : -Infinity;
          ctx.strokeStyle = `rgba(${EDGE_RGB}, ${weighted ? 0.45 : this.edges > 5000 ? 0.12 : 0.22})`;
          ctx.lineWidth = weighted ? 0.6 + 2.4 * k / (bands.length - 1) : 0.6;
          ctx.beginPath();
          for (let e = 0; e < this.edges; e++) {
            if (weighted && !(this.weight[e] >= lower && this.weight[e] < upper)) continue;
            const a = this.source[e], c = this.target[e];
            const ax = s * x[a] + ox, ay = s * y[a] + oy, bx = s * x[c] + ox, by = s * y[c] + oy;
            if ((ax < 0 && bx < 0) || (ax > cw && bx > cw) || (ay < 0 && by < 0) || (ay > ch && by > ch)) continue;
            ctx.moveTo(ax, ay); ctx.lineTo(bx, by);
          }
          ctx.stroke();
        });
        if (zoomed) this.drawArrows(ctx, s, ox, oy, cw, ch);
      }
      // the clones: one path per colour; squares when small, discs when zoomed in; faded when a module is marked
      const size = this.size(), half = size / 2, discs = size >= 5, marking = this.markedCount > 0;
      for (const pass of marking ? [0, 1] : [1]) {
        ctx.globalAlpha = marking && pass === 0 ? 0.2 : 1;
        this.byColour.forEach((members, k) => {
          ctx.fillStyle = this.colours[k];
          ctx.beginPath();
          for (let j = 0; j < members.length; j++) {
            const i = members[j];
            if (marking && this.marked[i] !== pass) continue;
            if (this.shown !== null && !this.shown[i]) continue;
            const px = s * x[i] + ox, py = s * y[i] + oy;
            const f = this.sizes ? this.sizes[i] : 1, h = half * f;
            if (px < -h || py < -h || px > cw + h || py > ch + h) continue;
            if (discs) { ctx.moveTo(px + h, py); ctx.arc(px, py, h, 0, 2 * Math.PI); }
            else ctx.rect(px - h, py - h, 2 * h, 2 * h);
          }
          ctx.fill();
        });
      }
      ctx.globalAlpha = 1;
      // a searched word's clone path: a line through its clones in order, each ringed
      if (this.path) {
        ctx.strokeStyle = PATH_COLOUR;
        ctx.lineWidth = 2;
        ctx.beginPath();
        this.path.forEach((i, k) => {
          const px = s * x[i] + ox, py = s * y[i] + oy;
          if (k === 0) ctx.moveTo(px, py); else ctx.lineTo(px, py);
        });
        ctx.stroke();
        ctx.beginPath();
        for (const i of this.path) {
          const px = s * x[i] + ox, py = s * y[i] + oy;
          ctx.moveTo(px + half + 3, py); ctx.arc(px, py, half + 3, 0, 2 * Math.PI);
        }
        ctx.stroke();
      }
      // the ego network's clone, ringed
      const centre = this.shownData && Number.isInteger(this.shownData.centre) ? this.shownData.centre : -1;
      if (centre >= 0 && centre < this.n) {
        ctx.strokeStyle = '#000';
        ctx.lineWidth = 2;
        ctx.beginPath();
        ctx.arc(s * x[centre] + ox, s * y[centre] + oy, half + 4, 0, 2 * Math.PI);
        ctx.stroke();
      }
      // the clone selected in the clone table, ringed
      if (this.selected >= 0 && this.isShown(this.selected)) {
        ctx.strokeStyle = SELECTED_COLOUR;
        ctx.lineWidth = 3;
        ctx.beginPath();
        ctx.arc(s * x[this.selected] + ox, s * y[this.selected] + oy, half + 6, 0, 2 * Math.PI);
        ctx.stroke();
      }
      const labelled = this.drawLabels(ctx, space, s, ox, oy, cw, ch, half);
      if (weighted && labelled) this.drawWeights(ctx, space, s, ox, oy, cw, ch);  // T beside the clones it joins
      this.labelBoxes = space.boxes;  // the boxes of every label written (tests read them)
      this.cacheView = {s: v.s, ox: v.ox, oy: v.oy};
      this.draws++;
      this.lastDrawMs = performance.now() - t0;
    }

    /** The top modules' names on a light box (the most flow first) while the view is not zoomed in far, then the
     * clones' labels once few clones are in view; a label that would overlap one written before it, or a clone
     * other than its own, is left out. Returns whether the clones' labels were written. */
    drawLabels(ctx, space, s, ox, oy, cw, ch, half) {
      const x = this.x, y = this.y;
      const modules = s < 6 * this.fitScale && this.shown === null ? this.moduleLabels : [];
      const clones = this.labels.length === this.n && this.inView() <= MAX_CLONE_LABELS;
      const placed = [];
      ctx.font = '11px sans-serif';
      for (const label of modules) {
        const px = s * label.x + ox + 2, py = s * label.y + oy + 2, w = ctx.measureText(label.text).width;
        if (space.take(px - 2, py - 1, w + 4, 14)) placed.push([label.text, px, py, w]);
      }
      const written = [];
      if (clones) {
        const inCache = [];
        for (let i = 0; i < this.n; i++) {
          const px = s * x[i] + ox, py = s * y[i] + oy;
          if (this.isShown(i) && px >= 0 && py >= 0 && px <= cw && py <= ch) inCache.push(i);
        }
        const own = new Map();  // the clones' squares are taken first: a label does not cover another clone
        for (const i of inCache) own.set(i, space.mark(s * x[i] + ox - half, s * y[i] + oy - half, 2 * half, 2 * half, i));
        ctx.font = '10px sans-serif';
        for (const i of inCache) {
          const px = s * x[i] + ox + half + 2, py = s * y[i] + oy, w = ctx.measureText(this.labels[i]).width;
          if (space.take(px, py - 6, w, 12, i)) written.push([this.labels[i], px, py]);
        }
      }
      ctx.textBaseline = 'middle';
      ctx.fillStyle = '#333';
      for (const [text, px, py] of written) ctx.fillText(text, px, py);
      ctx.font = '11px sans-serif';
      ctx.textBaseline = 'top';
      for (const [text, px, py, w] of placed) {
        ctx.fillStyle = 'rgba(255, 255, 255, 0.75)';
        ctx.fillRect(px - 2, py - 1, w + 4, 14);
        ctx.fillStyle = '#333';
        ctx.fillText(text, px, py);
      }
      this.labelsDrawn = written.length + placed.length;
      return clones;
    }

    /** Each drawn transition's T, two decimals at its middle, when at most MAX_WEIGHT_LABELS are in view; one that
     * would overlap a label or a clone is left out. */
    drawWeights(ctx, space, s, ox, oy, cw, ch) {
      const x = this.x, y = this.y, m = this.margin, middles = [];
      for (let e = 0; e < this.edges; e++) {
        const a = this.source[e], c = this.target[e];
        const mx = s * (x[a] + x[c]) / 2 + ox, my = s * (y[a] + y[c]) / 2 + oy;
        if (mx >= m && my >= m && mx <= m + this.width && my <= m + this.height) middles.push([e, mx, my]);
        if (middles.length > MAX_WEIGHT_LABELS) return;
      }
      ctx.font = '9px sans-serif';
      ctx.textBaseline = 'middle';
      ctx.fillStyle = '#555';
      for (const [e, mx, my] of middles) {
        const text = this.weight[e].toFixed(2), w = ctx.measureText(text).width;
        if (!space.take(mx - w / 2, my - 5, w, 10)) continue;
        ctx.fillText(text, mx - w / 2, my);
        this.weightsDrawn++;
      }
    }

    /** Arrowheads at the target end of each drawn transition (zoomed in far enough for them to read). */
    drawArrows(ctx, s, ox, oy, cw, ch) {
      const x = this.x, y = this.y, head = Math.max(4, this.size() * 0.8), back = this.size() / 2 + 1;
      ctx.fillStyle = `rgba(${EDGE_RGB}, 0.6)`;
      ctx.beginPath();
      for (let e = 0; e < this.edges; e++) {
        const a = this.source[e], c = this.target[e];
        const ax = s * x[a] + ox, ay = s * y[a] + oy, bx = s * x[c] + ox, by = s * y[c] + oy;
        if (bx < 0 || by < 0 || bx > cw || by > ch) continue;
        const dx = bx - ax, dy = by - ay, length = Math.hypot(dx, dy);
        if (length < 2 * head) continue;
        const ux = dx / length, uy = dy / length, tx = bx - ux * back, ty = by - uy * back;
        ctx.moveTo(tx, ty);
        ctx.lineTo(tx - ux * head - uy * head * 0.45, ty - uy * head + ux * head * 0.45);
        ctx.lineTo(tx - ux * head + uy * head * 0.45, ty - uy * head - ux * head * 0.45);
        ctx.closePath();
      }
      ctx.fill();
      this.arrows = (this.arrows || 0) + 1;
    }

    /** How many clones lie in the view itself (not its margin). */
    inView() {
      const v = this.view; let count = 0;
      for (let i = 0; i < this.n; i++) {
        if (!this.isShown(i)) continue;
        const px = v.s * this.x[i] + v.ox, py = v.s * this.y[i] + v.oy;
        if (px >= 0 && py >= 0 && px <= this.width && py <= this.height) count++;
      }
      return count;
    }

    /** Where the cache lands on screen at the current view: its top left (tx, ty) and scale k. */
    placement() {
      const c = this.cacheView, v = this.view, k = v.s / c.s, m = this.margin;
      return {k: k, tx: v.ox - k * (m + c.ox), ty: v.oy - k * (m + c.oy)};
    }

    /** Whether the cache, placed at the current view, covers the whole view. */
    covered() {
      if (!this.cacheView) return false;
      const p = this.placement(), m = this.margin;
      return p.tx <= 0 && p.ty <= 0 && p.tx + p.k * (this.width + 2 * m) >= this.width
        && p.ty + p.k * (this.height + 2 * m) >= this.height;
    }

    /** Copy the cache onto the canvas at the current view (shifted while panning, scaled while zooming). */
    present() {
      const ctx = this.canvas.getContext('2d', {alpha: false}), dpr = this.dpr;
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      ctx.fillStyle = BACKGROUND;
      if (!this.cacheView) { ctx.fillRect(0, 0, this.canvas.width, this.canvas.height); return; }
      const p = this.placement();
      if (!this.covered()) ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
      if (Math.abs(p.k - 1) < 1e-9) {  // a pan: whole device pixels, no resampling
        ctx.drawImage(this.cache, Math.round(p.tx * dpr), Math.round(p.ty * dpr));
      } else {
        ctx.imageSmoothingEnabled = true;
        ctx.drawImage(this.cache, p.tx * dpr, p.ty * dpr, p.k * this.cache.width, p.k * this.cache.height);
      }
      this.frames++;
    }

    /** Present at the next animation frame (once however many moves came before it). */
    request() {
      if (this.frame) return;
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        if (this.drag && !this.covered()) this.drawScene();  // the drag left the cached area
        this.present();
      });
    }

    /** The pointer's position in CSS pixels from the canvas's top left. */
    at(event) {
      const box = this.canvas.getBoundingClientRect();
      return [event.clientX - box.left, event.clientY - box.top];
    }

    bind() {
      const c = this.canvas;
      c.addEventListener('pointerdown', event => {
        if (event.button !== 0) return;
        // the drag in the window's coordinates: the page may move the canvas meanwhile (a scrollbar comes or goes)
        this.drag = {cx: event.clientX, cy: event.clientY, ox: this.view.ox, oy: this.view.oy, moved: false};
        this.hideTip();
        c.style.cursor = 'grabbing';
        window.addEventListener('pointermove', this.onDrag);
        window.addEventListener('pointerup', this.onDrop);
        event.preventDefault();
      });
      this.onDrag = event => {
        const d = this.drag;
        if (!d) return;
        const dx = event.clientX - d.cx, dy = event.clientY - d.cy;
        if (!d.moved && Math.hypot(dx, dy) < CLICK_SLOP_PX) return;
        d.moved = true;
        this.view.ox = d.ox + dx; this.view.oy = d.oy + dy;
        this.request();
      };
      this.onDrop = event => {
        const d = this.drag;
        window.removeEventListener('pointermove', this.onDrag);
        window.removeEventListener('pointerup', this.onDrop);
        this.drag = null;
        c.style.cursor = 'grab';
        if (!d) return;
        if (!d.moved) { this.click(...this.at(event)); return; }
        const p = this.placement();  // half the margin used up: draw again, so that the next drag has one
        if (!this.covered() || Math.abs(p.tx + this.margin) > this.margin / 2 || Math.abs(p.ty + this.margin) > this.margin / 2) {
          setTimeout(() => { if (!this.drag) { this.drawScene(); this.present(); } }, 0);
        }
      };
      c.addEventListener('pointermove', event => {
        if (this.drag) return;
        this.hoverAt = this.at(event);
        if (this.hovering) return;
        this.hovering = requestAnimationFrame(() => { this.hovering = 0; this.hover(); });
      });
      c.addEventListener('pointerleave', () => { this.hoverAt = null; this.hideTip(); });
      c.addEventListener('wheel', event => {
        event.preventDefault();
        if (!this.cacheView) return;
        const [px, py] = this.at(event), v = this.view;
        const unit = event.deltaMode === 1 ? 16 : event.deltaMode === 2 ? 400 : 1;
        const f = Math.exp(-event.deltaY * unit * 0.0015);
        const s = Math.min(this.fitScale * 400, Math.max(this.fitScale / 4, v.s * f));
        this.view = {s: s, ox: px - (px - v.ox) * s / v.s, oy: py - (py - v.oy) * s / v.s};
        this.hideTip();
        this.request();
        clearTimeout(this.settle);
        this.settle = setTimeout(() => { this.drawScene(); this.present(); }, ZOOM_SETTLE_MS);
      }, {passive: false});
      c.addEventListener('dblclick', () => this.fit());
    }

    /** The tooltip of the clone under the pointer: its label and its group's text (module or character). */
    hover() {
      if (!this.hoverAt || this.drag) return;
      const [px, py] = this.hoverAt, i = this.nearest(px, py);
      if (i < 0) { this.hideTip(); return; }
      const g = this.group[i];
      this.tip.textContent = `${this.labels[i] || 'clone ' + i} · ${this.groups.text[g]}`;
      this.tip.style.display = 'block';
      const left = Math.min(px + 12, Math.max(0, this.width - this.tip.offsetWidth - 4));
      this.tip.style.left = `${left}px`;
      this.tip.style.top = `${Math.max(0, py - 28)}px`;
      this.canvas.style.cursor = 'pointer';
    }

    hideTip() { this.tip.style.display = 'none'; this.canvas.style.cursor = this.drag ? 'grabbing' : 'grab'; }

    /** A click: the clone under the pointer (if any) goes to the page's store, with its top module. */
    click(px, py) {
      const i = this.nearest(px, py);
      if (i < 0 || !this.clickedId || !window.dash_clientside || !window.dash_clientside.set_props) return;
      this.clicks++;
      const module = this.groups.module[this.group[i]];
      const label = this.labels[i] === undefined ? null : this.labels[i];
      window.dash_clientside.set_props(this.clickedId, {data: {clone: i, module: module, label: label, count: this.clicks}});
    }
  }

  /** Where labels are written: a grid of LABEL_CELL-pixel cells, each taken by at most one label or clone. */
  class LabelSpace {
    constructor() { this.cells = new Map(); this.boxes = []; }

    /** The cells of the box (x, y, w, h). */
    cellsOf(x, y, w, h) {
      const out = [], c0 = Math.floor(x / LABEL_CELL), c1 = Math.floor((x + w) / LABEL_CELL);
      const r0 = Math.floor(y / LABEL_CELL), r1 = Math.floor((y + h) / LABEL_CELL);
      for (let r = r0; r <= r1; r++) for (let c = c0; c <= c1; c++) out.push(r * 100003 + c);
      return out;
    }

    /** Mark the box as taken by ``owner`` (a clone's square; overlaps allowed). */
    mark(x, y, w, h, owner) { for (const k of this.cellsOf(x, y, w, h)) if (!this.cells.has(k)) this.cells.set(k, owner); }

    /** Take the box when none of its cells is taken but by ``owner``; whether it was taken. */
    take(x, y, w, h, owner = -2) {
      const cells = this.cellsOf(x, y, w, h);
      for (const k of cells) { const held = this.cells.get(k); if (held !== undefined && held !== owner) return false; }
      for (const k of cells) this.cells.set(k, -1);
      this.boxes.push([x, y, w, h]);
      return true;
    }
  }

  /** The container's renderer, made on first use (and again if Dash replaced the container's element). */
  function renderer(containerId, clickedId) {
    const container = document.getElementById(containerId);
    if (!container) return null;
    if (!container.wholeGraph || !container.contains(container.wholeGraph.canvas)) {
      container.wholeGraph = new WholeGraph(container, clickedId);
    }
    return container.wholeGraph;
  }

  window.WholeGraph = WholeGraph;  // for the benchmark's page (bench/bench_whole_graph.py)
  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    whole_graph: {
      /** Draw the store's data (null: nothing yet) with the marked clones and the filter's (shown); returns how
       * many clones are drawn. */
      draw: function (data, marked, shown, path, selectedRows, containerId, clickedId) {
        const view = renderer(containerId, clickedId);
        if (!view || !data || !data.x) return 0;
        const fresh = view.data !== data, kept = view.n === data.x.length && view.fitScale > 0;
        const filtered = view.shownData !== shown;
        if (fresh) { view.data = data; view.setData(data); }
        view.shownData = shown;
        view.setShown(shown);
        view.setMarked(marked);
        view.setPath(path);
        const moved = view.setSelected(selectedRows);
        if ((fresh && !kept) || filtered) view.fit();  // new clones or a new filter: every one shown in view
        else {  // the same clones (other transitions, marks): the view stays, or goes to a clone newly selected
          if (moved) view.showSelected();
          view.drawScene(); view.present();
        }
        return view.shownCount;
      },
      /** The "Fit" button: every clone in view again. */
      fit: function (clicks, containerId) {
        const view = renderer(containerId, null);
        if (view && view.n) view.fit();
        return clicks || 0;
      },
    },
  });
})();
