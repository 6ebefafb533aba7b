"""Benchmark: drawing the whole clone graph in the browser (the Communities page's whole-graph view), by renderer.

Each case is n clones laid out by :func:`engine.api.drawing.packed_layout` on a synthetic module tree (about 8 clones
per leaf module, 12 leaves per top module; coloured by top module) and E transitions (each clone sends 11, nine of them
inside its own top module, as in a 5,000-state model of Alice at the default threshold 1e-3: 57,000 edges), the first E
with the most weight drawn. In headless Chromium (Debian's, software WebGL: SwiftShader), one page per case:

* first draw ms: from handing the data to the renderer to the second animation frame after it has drawn;
* fps while panning: a drag of 90 frames (one move a frame: a real mouse drag on Plotly's drag layer, the camera or
  the pan of the others), frames per second over the drag, and the redraws the renderer made in that time
  (``redraws``: Plotly's WebGL scene draws, cytoscape's ``render`` and sigma's ``afterRender`` events; a renderer
  that skipped frames would show fewer than 90; for ours, the full scene draws: its frames shift the cached bitmap);
* ours only: ``full redraw ms``, one full-detail draw of the scene (what a zoom costs once it settles, and a drag
  that leaves the cached area), and ``fps, fast drag``: a second drag of 90 frames at 20 x 12 pixels a frame, which
  leaves the cached area (its margin: half the view's longer side) several times; ``fps zooming``: 30 wheel steps
  (one a frame, each 6% closer: the cached bitmap scaled), and the full redraw at that zoom once the wheel rests.

Renderers: ours (``assets/whole_graph.js``, the app's own: Canvas 2D, the scene cached in a bitmap larger than the
view, shifted while panning), Plotly ``Scattergl`` (plotly.py's bundled plotly.js; edges one line trace with gaps),
and when ``--js DIR`` holds them (``npm pack cytoscape sigma graphology``, unpacked), cytoscape.js with its canvas
renderer and with its WebGL renderer (3.31 on; dash-cytoscape 1.0 bundles 3.28, without it), and sigma.js 3 on
graphology.

    python bench/bench_whole_graph.py [--sizes 5000 30000] [--edges 0 2000 20000] [--js /tmp/wg-js]
    python bench/bench_whole_graph.py --renderers ours-canvas plotly-scattergl
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402
import plotly  # noqa: E402

from bench.machine import describe_machine  # noqa: E402
from engine import api  # noqa: E402

PAN_FRAMES = 90
OUT_DEGREE = 11
CANVAS = (1200, 800)


def synthetic_graph(n: int, seed: int = 0) -> dict[str, list]:
    """Positions, top-module colours and ``n * OUT_DEGREE`` edges (most weight first) of a synthetic clustered graph."""
    rng = np.random.default_rng(seed)
    leaves = max(1, n // 8)
    tops = max(1, leaves // 12)
    parents = np.concatenate([np.full(tops, -1), rng.integers(0, tops, size=leaves)])
    members = tops + rng.integers(0, leaves, size=n)
    weights = np.bincount(members, minlength=tops + leaves).astype(float)
    np.add.at(weights, parents[tops:], weights[tops:])
    layout = api.drawing.packed_layout(parents, np.maximum(weights, 1), members, rng.random(n), aspect=1.5)
    top = parents[members]
    by_top = np.argsort(top, kind="stable")
    starts = np.searchsorted(top[by_top], np.arange(tops))
    ends = np.searchsorted(top[by_top], np.arange(tops), side="right")
    sources = np.repeat(np.arange(n), OUT_DEGREE)
    inside = rng.random(len(sources)) < 9 / 11
    low, high = starts[top[sources]], ends[top[sources]]
    local = by_top[low + (rng.random(len(sources)) * (high - low)).astype(np.int64)]
    targets = np.where(inside, local, rng.integers(0, n, size=len(sources)))
    order = np.argsort(-rng.random(len(sources)))  # "most weight first": any fixed order
    return {
        "x": np.round(layout.positions[:, 0], 5).tolist(),
        "y": np.round(layout.positions[:, 1], 5).tolist(),
        "colour": [api.drawing.module_colour(int(t) + 1) for t in top],
        "label": [f"c:{i}" for i in range(n)],
        "source": sources[order].tolist(),
        "target": targets[order].tolist(),
    }


HARNESS = """
function frames(k) { return new Promise(r => { let i = 0; const f = () => (++i >= k ? r() : requestAnimationFrame(f));
  requestAnimationFrame(f); }); }
async function drag(step, count) {  // one move a frame; returns frames per second over the drag
  const times = [];
  await new Promise(resolve => {
    let i = 0;
    const f = t => { times.push(t); if (i >= count) { resolve(); return; } step(i++); requestAnimationFrame(f); };
    requestAnimationFrame(f);
  });
  return 1000 * (times.length - 2) / (times[times.length - 1] - times[1]);
}
"""

PAGES = {
    "plotly-scattergl": (
        ["plotly.min.js"],
        """
window.bench = async function (E) {
  const d = window.DATA, gd = document.getElementById('g'), ex = [], ey = [];
  for (let e = 0; e < E; e++) { const a = d.source[e], b = d.target[e];
    ex.push(d.x[a], d.x[b], null); ey.push(d.y[a], d.y[b], null); }
  const t0 = performance.now();
  await Plotly.newPlot(gd, [
    {type: 'scattergl', mode: 'lines', x: ex, y: ey, hoverinfo: 'skip',
     line: {width: 0.5, color: 'rgba(120,120,120,0.25)'}},
    {type: 'scattergl', mode: 'markers', x: d.x, y: d.y, text: d.label, hoverinfo: 'text',
     marker: {size: 4, color: d.colour}},
  ], {width: WIDTH, height: HEIGHT, dragmode: 'pan', showlegend: false, margin: {l: 0, r: 0, t: 0, b: 0},
      xaxis: {visible: false}, yaxis: {visible: false, autorange: 'reversed', scaleanchor: 'x'}}, {scrollZoom: true});
  await frames(2);
  const first = performance.now() - t0;
  const scene = gd._fullLayout._plots.xy._scene; let redraws = 0; const draw = scene.draw;
  scene.draw = function () { redraws++; return draw.apply(this, arguments); };
  const layer = gd.querySelector('.nsewdrag'), box = layer.getBoundingClientRect();
  const at = (type, i, target) => target.dispatchEvent(new MouseEvent(type, {bubbles: true, cancelable: true,
    clientX: box.left + box.width / 2 + 3 * i, clientY: box.top + box.height / 2 + 2 * i, buttons: 1}));
  at('mousedown', 0, layer);
  const fps = await drag(i => at('mousemove', i + 1, document), PAN_FRAMES);
  at('mouseup', PAN_FRAMES, document);
  return {first: first, fps: fps, redraws: redraws};
};
""",
    ),
    "ours-canvas": (
        ["whole_graph.js"],
        """
window.bench = async function (E) {
  const d = window.DATA, t0 = performance.now(), colours = [], index = new Map();
  const group = d.colour.map(c => { if (!index.has(c)) { index.set(c, colours.length); colours.push(c); }
    return index.get(c); });
  const data = {x: d.x, y: d.y, group: group, labels: d.label, source: d.source.slice(0, E),
    target: d.target.slice(0, E), groups: {text: colours, colour: colours, module: colours}, module_labels: []};
  const view = new WholeGraph(document.getElementById('g'), null);
  view.setData(data); view.setMarked(null); view.fit();
  await frames(2);
  const first = performance.now() - t0, scene = view.lastDrawMs, canvas = view.canvas;
  const box = canvas.getBoundingClientRect();
  async function pan(dx, dy) {  // a pointer drag, one move a frame; frames per second and full redraws made
    const at = (type, i, target) => target.dispatchEvent(new PointerEvent(type, {bubbles: true, cancelable: true,
      clientX: box.left + box.width / 2 + dx * i, clientY: box.top + box.height / 2 + dy * i, button: 0,
      buttons: 1, pointerId: 1, isPrimary: true}));
    const draws = view.draws;
    at('pointerdown', 0, canvas);
    const fps = await drag(i => at('pointermove', i + 1, window), PAN_FRAMES);
    const redraws = view.draws - draws;
    at('pointerup', PAN_FRAMES, window);
    await frames(2);
    return [fps, redraws];
  }
  const [fps, redraws] = await pan(3, 2);
  const [fast, fastRedraws] = await pan(-20, -12);
  const wheel = i => canvas.dispatchEvent(new WheelEvent('wheel', {bubbles: true, cancelable: true, deltaY: -40,
    clientX: box.left + box.width / 2, clientY: box.top + box.height / 2}));
  const zoom = await drag(wheel, 30);  // 30 wheel steps, one a frame: the cached bitmap scaled
  await new Promise(r => setTimeout(r, 300));  // the full redraw once the wheel rests
  return {first: first, fps: fps, redraws: redraws, scene: scene, fast: fast, fast_redraws: fastRedraws,
    zoom: zoom, zoomed_scene: view.lastDrawMs, edges: view.edges};
};
""",
    ),
    "cytoscape-canvas": (["cytoscape.min.js"], None),
    "cytoscape-webgl": (["cytoscape.min.js"], None),
    "sigma": (
        ["graphology.umd.min.js", "sigma.min.js"],
        """
window.bench = async function (E) {
  const d = window.DATA, t0 = performance.now(), g = new graphology.Graph({multi: true});
  for (let i = 0; i < d.x.length; i++)
    g.addNode(i, {x: d.x[i], y: -d.y[i], size: 2, color: d.colour[i], label: d.label[i]});
  for (let e = 0; e < E; e++) g.addEdge(d.source[e], d.target[e], {size: 0.5, color: '#ddd'});
  const s = new Sigma(g, document.getElementById('g'), {renderLabels: false});
  await frames(2);
  const first = performance.now() - t0, camera = s.getCamera(), start = camera.getState();
  let redraws = 0;
  s.on('afterRender', () => redraws++);
  const move = i => camera.setState({x: start.x + 0.002 * (i + 1), y: start.y + 0.001 * (i + 1)});
  const fps = await drag(move, PAN_FRAMES);
  return {first: first, fps: fps, redraws: redraws};
};
""",
    ),
}

CYTOSCAPE = """
window.bench = async function (E) {
  const d = window.DATA, els = [];
  for (let i = 0; i < d.x.length; i++) els.push({data: {id: 'n' + i, c: d.colour[i], label: d.label[i]},
    position: {x: d.x[i] * 800, y: d.y[i] * 800}});
  for (let e = 0; e < E; e++) els.push({data: {id: 'e' + e, source: 'n' + d.source[e], target: 'n' + d.target[e]}});
  const t0 = performance.now();
  const cy = cytoscape({container: document.getElementById('g'), elements: els, layout: {name: 'preset'},
    style: [{selector: 'node', style: {width: 3, height: 3, 'background-color': 'data(c)'}},
            {selector: 'edge', style: {width: 0.5, 'line-color': '#ccc'}}],
    renderer: {name: 'canvas', webgl: WEBGL}, hideEdgesOnViewport: false, textureOnViewport: false});
  await frames(2);
  const first = performance.now() - t0;
  let redraws = 0;
  cy.on('render', () => redraws++);
  const fps = await drag(i => cy.panBy({x: 3, y: 2}), PAN_FRAMES);
  return {first: first, fps: fps, redraws: redraws};
};
"""


def page(folder: Path, renderer: str, scripts: list[Path], data_file: Path) -> Path:
    """An HTML page that loads the renderer's scripts, the case's data and the harness (``window.bench``)."""
    body = PAGES[renderer][1] or CYTOSCAPE.replace("WEBGL", "true" if renderer.endswith("webgl") else "false")
    for name, value in (("WIDTH", CANVAS[0]), ("HEIGHT", CANVAS[1]), ("PAN_FRAMES", PAN_FRAMES)):
        body = body.replace(name, str(value))
    tags = "".join(f'<script src="{s.as_uri()}"></script>' for s in [*scripts, data_file])
    html = (
        f"<!doctype html><html><body style='margin:0'><div id='g' style='width:{CANVAS[0]}px;height:{CANVAS[1]}px'>"
        f"</div>{tags}<script>{HARNESS}{body}</script></body></html>"
    )
    path = folder / f"{renderer}.html"
    path.write_text(html, encoding="utf-8")
    return path


def script_paths(renderer: str, js: Path | None) -> list[Path] | None:
    """The renderer's script files, or None when they are not here."""
    names = PAGES[renderer][0]
    if renderer.startswith("ours"):
        return [Path(__file__).resolve().parents[1] / "assets" / "whole_graph.js"]
    if renderer.startswith("plotly"):
        return [Path(plotly.__file__).parent / "package_data" / "plotly.min.js"]
    if js is None:
        return None
    found = [next(iter(sorted(js.glob(f"*/package/dist/{name}"))), None) for name in names]
    return None if None in found else found  # type: ignore[return-value]


def measure(renderer: str, scripts: list[Path], data_file: Path, edges: int, folder: Path) -> dict:
    """One case in a fresh headless Chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from support import CHROMEDRIVER, chrome_options

    options = chrome_options()
    options.add_argument("--headless=new")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_script_timeout(300)
        driver.get(page(folder, renderer, scripts, data_file).as_uri())
        return driver.execute_async_script("const done = arguments[1]; bench(arguments[0]).then(done);", edges)
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 30000])
    parser.add_argument("--edges", type=int, nargs="+", default=[0, 2000, 20000])
    parser.add_argument("--js", type=Path, default=None, help="folder of unpacked npm packages (cytoscape, sigma)")
    parser.add_argument("--renderers", nargs="+", default=list(PAGES))
    args = parser.parse_args()
    print(describe_machine())
    print(f"headless Chromium, software WebGL; canvas {CANVAS[0]} x {CANVAS[1]}; {PAN_FRAMES} frames of panning\n")
    print(
        "| renderer | nodes | edges | first draw ms | fps while panning | redraws | full redraw ms | fps, fast drag "
        "| fps zooming (then redraw ms) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="bench-whole-graph-") as tmp:
        folder = Path(tmp)
        for n in args.sizes:
            data = synthetic_graph(n)
            data_file = folder / f"data-{n}.js"
            data_file.write_text("window.DATA = " + json.dumps(data) + ";", encoding="utf-8")
            for edges in args.edges:  # the renderers interleaved: each case on each renderer in turn
                edges = min(edges, len(data["source"]))
                for renderer in args.renderers:
                    scripts = script_paths(renderer, args.js)
                    if scripts is None:
                        continue
                    started = time.perf_counter()
                    try:
                        got = measure(renderer, scripts, data_file, edges, folder)
                    except Exception as exc:  # noqa: BLE001 - a renderer that fails is a row that says so
                        print(f"| {renderer} | {n:,} | {edges:,} | failed: {type(exc).__name__} | | |", flush=True)
                        continue
                    redraws = "" if got.get("redraws") is None else str(got["redraws"])
                    scene = "" if got.get("scene") is None else f"{got['scene']:,.0f}"
                    fast = "" if got.get("fast") is None else f"{got['fast']:.1f} ({got['fast_redraws']} redraws)"
                    zoom = "" if got.get("zoom") is None else f"{got['zoom']:.1f} ({got['zoomed_scene']:,.0f})"
                    print(
                        f"| {renderer} | {n:,} | {edges:,} | {got['first']:,.0f} | {got['fps']:.1f} | {redraws} |"
                        f" {scene} | {fast} | {zoom} |  <!-- {time.perf_counter() - started:.0f} s -->",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
