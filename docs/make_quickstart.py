"""Write docs/quickstart.ipynb (the cells below, no outputs) and, with ``--execute``, run it and write its figures
as standalone HTML files under docs/figures/ (the guide links to them). The test suite runs the notebook itself
(tests/test_notebook.py).

    python docs/make_quickstart.py [--execute]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import nbformat

DOCS = Path(__file__).resolve().parent
NOTEBOOK = DOCS / "quickstart.ipynb"
FIGURES = DOCS / "figures"

CELLS = [
    ("markdown", """# CHMMs from a notebook

A cloned HMM (Dedieu et al. 2019) learned from text, from token sequences and from an event log, scored, sampled and
decoded with hmmlearn's conventions, and its graph explored: the figures are the explorer's own, and the last cell
opens the whole explorer inside the notebook."""),
    ("code", """import urllib.request
from pathlib import Path

import numpy as np

import chmm

ROOT = Path.cwd() if (Path.cwd() / "sample_models").is_dir() else Path.cwd().parent
alice = (ROOT / "sample_models" / "carroll-alice.txt").read_text(encoding="utf-8")
train, test = alice[:60_000], alice[60_000:70_000]"""),
    ("markdown", """## Text

`fit` takes a string as characters. With `states` and `pseudocount` left at `"auto"` they are chosen on a held-out
tenth within `budget` minutes, as `chmm train` does; here they are given, to keep the notebook quick. `jobs=1` runs
the restarts in this process."""),
    ("code", """model = chmm.CHMM(states=300, pseudocount=1e-3, iterations=40, jobs=1).fit(train)
print(model, model.n_states_, "clones over", model.n_features_, "symbols")
print(f"test: {model.bits_per_symbol(test):.3f} bits per character")"""),
    ("code", """text, clones = model.sample(160, random_state=0)
print(text)
print(clones[:12])"""),
    ("code", "chmm.training_curves(model)"),
    ("markdown", """## Tokens

A list of sequences (here Alice's sentences as words) is many independent sequences of different lengths, as
hmmlearn's `X` and `lengths` are; the peers take the same `X`."""),
    ("code", """sentences = [s.split() for s in alice.lower().replace("\\n", " ").split(".") if len(s.split()) > 2]
words = chmm.CHMM(states=3000, pseudocount=1e-3, iterations=20, min_count=2, jobs=1).fit(sentences[:-100])
ngram = chmm.Learner("ngram").fit(sentences[:-100])
held_out = sentences[-100:]
print(f"CHMM {words.bits_per_symbol(held_out):.2f}, n-gram {ngram.bits_per_symbol(held_out):.2f} bits per word")"""),
    ("markdown", """## An event log

Cases of a process, each a sequence of events. `predict` gives each event's clone on the Viterbi path: the clones
of one event tell the contexts it occurs in apart. `decode(evidence=...)` reads uncertain events: each position is
a set of events with their likelihoods."""),
    ("code", """rng = np.random.default_rng(0)
def case():
    events = ["create", "check"]
    while rng.random() < 0.3:
        events += ["ask", "check"]
    events += ["approve", "ship", "invoice"] if rng.random() < 0.7 else ["reject"]
    return events + ["close"]
cases = [case() for _ in range(400)]
log = chmm.CHMM(states=40, pseudocount=1e-4, iterations=30, min_count=1, jobs=1).fit(cases)
print(cases[0], log.predict([cases[0]]))
_, clones = log.decode(evidence=[{"create": 1.0}, {"check": 1.0}, {"approve": 0.5, "reject": 0.5}, {"ship": 1.0}])
print([log.symbols_[k] for k in log.clone_symbol_[clones]])"""),
    ("markdown", """## The graph

Infomap on the clone graph, as the Communities page runs it: the module map, a module's subgraph and the whole graph
are the app's, at its positions and in its colours. `clone_graph` is the networkx graph, each clone with its
module."""),
    ("code", "chmm.module_map(model)"),
    ("code", "chmm.module_subgraph(model, \"1\")"),
    ("code", "chmm.whole_graph_figure(model)"),
    ("code", """graph = chmm.clone_graph(model)
print(graph.number_of_nodes(), "clones,", graph.number_of_edges(), "transitions")"""),
    ("markdown", """## The explorer

`chmm.explore(model)` opens the app, with every page, in the cell's output (`mode="tab"`, `"jupyterlab"` or
`"external"` elsewhere); called again with another model, the open tabs change to it.
"""),
    ("code", """import socket

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
url = chmm.explore(model, port=port)
print(url, urllib.request.urlopen(url + "_dash-layout", timeout=60).status)"""),
]


def notebook() -> nbformat.NotebookNode:
    """The quickstart notebook's cells, without outputs."""
    cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
             for kind, src in CELLS]  # fmt: skip
    book = nbformat.v4.new_notebook(cells=cells)
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return book


def execute(book: nbformat.NotebookNode, timeout: int = 900) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel started in docs/ (an error in a cell raises)."""
    from nbclient import NotebookClient

    NotebookClient(book, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(DOCS)}}).execute()
    return book


def write_figures(book: nbformat.NotebookNode) -> list[Path]:
    """Each plotly figure the notebook shows, as docs/figures/quickstart-N.html (plotly.js from its CDN)."""
    import plotly.io

    FIGURES.mkdir(exist_ok=True)
    written = []
    for cell in book.cells:
        for output in cell.get("outputs", []):
            figure = output.get("data", {}).get("application/vnd.plotly.v1+json")
            if figure is not None:
                path = FIGURES / f"quickstart-{len(written) + 1}.html"
                plotly.io.from_json(json.dumps(figure)).write_html(path, include_plotlyjs="cdn")
                written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="run it and write its figures")
    args = parser.parse_args()
    book = notebook()
    nbformat.write(book, NOTEBOOK)
    if args.execute:
        for path in write_figures(execute(book)):
            print(path.relative_to(DOCS.parent))


if __name__ == "__main__":
    main()
