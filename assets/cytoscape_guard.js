/*
 * A destroyed Cytoscape graph's late layout does nothing (issue 50). dash-cytoscape re-runs a graph's layout 100 ms
 * after elements are added or removed (its autoRefreshLayout, a lodash debounce it never cancels); when the graph is
 * unmounted within those 100 ms (the user opens another page, a card is redrawn), react-cytoscapejs has destroyed it
 * first, and the late layout's endBatch called notify on the destroyed renderer (null): "Uncaught TypeError: Cannot
 * read properties of null (reading 'notify')". dash-cytoscape hands every graph it mounts to window.cy; the first one
 * handed lets this script wrap the layout method of Cytoscape's core (the prototype every graph shares) so that a
 * destroyed graph's layout is a layout that does nothing. A living graph's layout is untouched, and so is every error
 * that is not this one. Plain ES2017, no dependency.
 */
(function () {
  "use strict";

  const guarded = new WeakSet();

  function idle() {
    // what a layout offers its caller (dash-cytoscape calls run; react-cytoscapejs run and stop), doing nothing
    const layout = {
      run: () => layout, start: () => layout, stop: () => layout, on: () => layout, one: () => layout,
      off: () => layout, emit: () => layout, promiseOn: () => Promise.resolve(), pon: () => Promise.resolve(),
    };
    return layout;
  }

  function guard(cy) {
    const core = cy && Object.getPrototypeOf(cy);
    if (!core || guarded.has(core) || typeof core.layout !== "function" || typeof core.destroyed !== "function") {
      return;
    }
    guarded.add(core);
    const layout = core.layout;
    core.layout = function (options) {
      return this.destroyed() ? idle() : layout.call(this, options);
    };
  }

  let last = window.cy;
  guard(last);
  Object.defineProperty(window, "cy", {
    configurable: true,
    get: () => last,
    set: (cy) => {
      guard(cy);
      last = cy;
    },
  });
})();
