"""Every component id of the app, in one place (pages import these; tests and browser tests use them too), except
the job panels' parts, which are made from their job's kind (:class:`app.jobs.panel.JobPanel`, :mod:`app.panels`:
``training-start``, ``map-progress``, ...)."""

# app shell (app/main.py)
SESSION = "session-id"  # dcc.Store(storage_type="session"): this tab's session id
JOB_BADGE = "job-badge"  # the navigation bar's running-job indicator
MODEL_INTRO = "model-intro"
MODEL_VERSION = "model-version"  # dcc.Store: changes whenever the session's current model changes
NAV = "nav"
MODEL_BADGE = "model-badge"

# Model page
MODEL_SUMMARY = "model-summary"
MODEL_CLONES_CHART = "model-clones-chart"
MODEL_HISTORY_CHART = "model-history-chart"
MODEL_UPLOAD = "model-upload"
MODEL_MESSAGE = "model-message"
MODEL_DOWNLOAD_BUTTON = "model-download-button"
MODEL_DOWNLOAD = "model-download"
MODEL_UNDO = "model-undo"

# Train page
CORPUS_UPLOAD = "corpus-upload"
CORPUS_SAMPLE_BUTTON = "corpus-sample-button"
CORPUS_VERSION = "corpus-version"
CORPUS_MESSAGE = "corpus-message"
CORPUS_PREVIEW = "corpus-preview"
TRAIN_STATES = "train-states"
TRAIN_ALLOCATION = "train-allocation"
TRAIN_NORMALISATION = "train-normalisation"
TRAIN_UNIT = "train-unit"
TRAIN_CLUSTER_NOTE = "train-cluster-note"
TRAIN_ALGORITHM = "train-algorithm"
TRAIN_ITERATIONS = "train-iterations"
TRAIN_BATCH_SIZE = "train-batch-size"
TRAIN_RESTARTS = "train-restarts"
TRAIN_START_KIND = "train-start-kind"
TRAIN_PSEUDOCOUNT = "train-pseudocount"
TRAIN_BUDGET = "train-budget"
TRAIN_VALIDATION = "train-validation"
TRAIN_SEED = "train-seed"
TRAIN_BACKEND = "train-backend"
TRAIN_ESTIMATE = "train-estimate"
TRAIN_RUNS_CHART = "train-runs-chart"
TRAIN_CHART = "train-chart"

# Generate page
SAMPLE_LENGTH = "sample-length"
SAMPLE_SEED = "sample-seed"
SAMPLE_MARK_RARE = "sample-mark-rare"
SCORE_PLACEHOLDER = "score-placeholder"
SCORE_PLACEHOLDER_MODE = "score-placeholder-mode"
SAMPLE_PREFIX = "sample-prefix"
SAMPLE_BUTTON = "sample-button"
SAMPLE_OUTPUT = "sample-output"
SCORE_TEXT = "score-text"
SCORE_BUTTON = "score-button"
SCORE_OUTPUT = "score-output"
SCORE_SURPRISAL = "score-surprisal"

# Decode page
DECODE_TEXT = "decode-text"
DECODE_SEED = "decode-seed"
DECODE_SCRAMBLE = "decode-scramble"
DECODE_CONSTRAINED = "decode-constrained"
DECODE_BUTTON = "decode-button"
DECODE_MESSAGE = "decode-message"
DECODE_OUTPUT = "decode-output"
DECODE_SCRAMBLED_FROM = "decode-scrambled-from"
DECODE_RESTORED = "decode-restored"

# Prune page
PRUNE_THRESHOLD = "prune-threshold"
PRUNE_THRESHOLD_LABEL = "prune-threshold-label"
PRUNE_THRESHOLD_TEXT = "prune-threshold-text"
PRUNE_SWEEP_DATA = "prune-sweep-data"
PRUNE_SWEEP_BUTTON = "prune-sweep-button"
PRUNE_CHART = "prune-chart"
PRUNE_SWEEP_MESSAGE = "prune-sweep-message"
PRUNE_APPLY = "prune-apply"
PRUNE_MESSAGE = "prune-message"

# Export page
EXPORT_FORMAT = "export-format"
EXPORT_THRESHOLD = "export-threshold"
EXPORT_MODULE = "export-module"
EXPORT_BUTTON = "export-button"
EXPORT_MODEL_BUTTON = "export-model-button"
EXPORT_DOWNLOAD = "export-download"
EXPORT_CANCEL = "export-cancel"
EXPORT_RUNNING = "export-running"
COMMUNITIES_EXPORT_LINK = "communities-export-link"
EXPORT_MESSAGE = "export-message"

# Communities page
COMMUNITIES_TRIALS = "communities-trials"
COMMUNITIES_TWO_LEVEL = "communities-two-level"
COMMUNITIES_SEED = "communities-seed"
COMMUNITIES_RUN = "communities-run"
COMMUNITIES_VERSION = "communities-version"  # dcc.Store: changes whenever a community run is saved
COMMUNITIES_MESSAGE = "communities-message"
COMMUNITIES_FILTER = "communities-filter"
COMMUNITIES_TABLE = "communities-table"
COMMUNITIES_DETAIL = "communities-detail"
COMMUNITIES_GRAPH = "communities-graph"
COMMUNITIES_GRAPH_NOTE = "communities-graph-note"
COMMUNITIES_THRESHOLD = "communities-threshold"
COMMUNITIES_PROGRESS = "communities-progress"
COMMUNITIES_WATCH = "communities-watch"  # an Infomap run whose process died is said (JobKind.reap_said)
COMMUNITIES_LEVEL = "communities-level"  # dcc.Store: the module whose submodules the table lists ("" = top)
COMMUNITIES_TRAIL = "communities-trail"
COMMUNITIES_DRILL = "communities-drill"
COMMUNITIES_CRUMB = "communities-crumb"  # pattern-matching type of the breadcrumb buttons
COMMUNITIES_MARKOV_TIME = "communities-markov-time"
COMMUNITIES_SELECTED = "communities-selected"  # dcc.Store: the module shown in the Module card (table row or map)
COMMUNITIES_MAP = "communities-map"
COMMUNITIES_MAP_NOTE = "communities-map-note"
COMMUNITIES_SEARCH = "communities-search"
COMMUNITIES_SEARCH_BUTTON = "communities-search-button"
COMMUNITIES_SEARCH_RESULT = "communities-search-result"
COMMUNITIES_PATH = "communities-path"  # dcc.Store: the last word search's clone path and modules
COMMUNITIES_INSPECT = "communities-inspect"
COMMUNITIES_PATH_MODULE = "communities-path-module"  # pattern-matching type of the path's module buttons
COMMUNITIES_HIERARCHY = "communities-hierarchy"
COMMUNITIES_GRAPH_LAYOUT = "communities-graph-layout"
COMMUNITIES_LAYOUT_KEPT = "communities-layout-kept"  # dcc.Store (local): the subgraph layout chosen last
COMMUNITIES_EDGE_MIN = "communities-edge-min"
COMMUNITIES_NODE_SIZE = "communities-node-size"
COMMUNITIES_NODE_COLOUR = "communities-node-colour"
COMMUNITIES_CLONE_SEARCH = "communities-clone-search"
COMMUNITIES_CLONE_FOUND = "communities-clone-found"  # where a clone searched by its label lives (beyond the module)
COMMUNITIES_CLONE_TABLE = "communities-clone-table"
COMMUNITIES_EDGE_TABLE = "communities-edge-table"
COMMUNITIES_TABLES_NOTE = "communities-tables-note"
COMMUNITIES_TABLES_WHOLE = "communities-tables-whole"  # button: the whole graph's tables (made only when asked)
COMMUNITIES_LEVELS = "communities-levels"
COMMUNITIES_ALLUVIAL = "communities-alluvial"
COMMUNITIES_VIEW_BUTTON = "communities-view-button"  # pattern-matching type: {"view": map|graph, "action": ...}
COMMUNITIES_MAP_LIMIT = "communities-map-limit"  # how many modules the map shows (the most flow first)
COMMUNITIES_MAP_PATH_NOTE = "communities-map-path-note"
COMMUNITIES_MAP_COLOUR = "communities-map-colour"  # what the module map's colours map
COMMUNITIES_MAP_SIZE = "communities-map-size"  # what its circles' sizes map
COMMUNITIES_MAP_LEGEND = "communities-map-legend"  # the legend of a mapped colour or size
COMMUNITIES_MAP_RULES = "communities-map-rules"  # store: the module map's colour and size rules
COMMUNITIES_MAP_MIN_FLOW = "communities-map-min-flow"  # the module map's filter: least flow, least clones, ...
COMMUNITIES_MAP_MIN_CLONES = "communities-map-min-clones"
COMMUNITIES_MAP_CENTRE = "communities-map-centre"  # ... and the neighbours of a module within some steps
COMMUNITIES_MAP_STEPS = "communities-map-steps"
COMMUNITIES_CLONE_STEPS = "communities-clone-steps"  # the subgraph: only the found clone's neighbours within steps
COMMUNITIES_DISTRIBUTIONS = "communities-distributions"
COMMUNITIES_DEGREE_MIN = "communities-degree-min"
COMMUNITIES_FLOW_MIN = "communities-flow-min"
COMMUNITIES_TABLE_CSV = "communities-table-csv"  # the module table's CSV button
COMMUNITIES_CLONE_TABLE_CSV = "communities-clone-table-csv"
COMMUNITIES_EDGE_TABLE_CSV = "communities-edge-table-csv"
COMMUNITIES_URL = "communities-url"  # dcc.Location of the page: its view (run, module, level, ...) in the query string
COMMUNITIES_VIEW_NOTE = "communities-view-note"  # what of a link's view could not be opened
COMMUNITIES_RUN_SHOWN = "communities-run-shown"  # which Infomap run the page shows: the last or the one before
COMMUNITIES_WHOLE_SHOW = "communities-whole-show"  # the button that draws the whole graph
COMMUNITIES_WHOLE_EDGES = "communities-whole-edges"  # how many transitions the whole graph draws
COMMUNITIES_WHOLE_LAYOUT = "communities-whole-layout"  # how it places the clones: by modules or by transitions
COMMUNITIES_WHOLE_GRAPH = "communities-whole-graph"  # html.Div: the canvas of every clone (assets/whole_graph.js)
COMMUNITIES_WHOLE_DATA = "communities-whole-data"  # store: the whole graph's columns, drawn by the canvas
COMMUNITIES_WHOLE_MARKED = "communities-whole-marked"  # store: the selected module's clones, bright in the canvas
COMMUNITIES_WHOLE_CLICKED = "communities-whole-clicked"  # store: the clone clicked in the canvas and its top module
COMMUNITIES_WHOLE_FIT = "communities-whole-fit"  # button: every clone in view again
COMMUNITIES_WHOLE_NOTE = "communities-whole-note"
COMMUNITIES_SHARE = "communities-share"  # store: the share token the page's link carried (None: none)
COMMUNITIES_RELOAD = "communities-reload"  # dcc.Location (refresh): the page opened afresh once a share is opened
COMMUNITIES_SHARE_OFFER = "communities-share-offer"  # a shared model to open, offered
COMMUNITIES_SHARE_BOX = "communities-share-box"  # the offer's box, shown when the link carries a share
COMMUNITIES_OPEN_SHARE = "communities-open-share"  # button (in the offer): make the shared model current
COMMUNITIES_SHARE_BUTTON = "communities-share-button"  # button: share this view (its link)
COMMUNITIES_SHARE_LINK = "communities-share-link"  # the shared view's link
COMMUNITIES_SHARE_ANCHOR = "communities-share-anchor"  # the link itself
COMMUNITIES_SAVED_VIEWS = "communities-saved-views"  # dropdown: the session's named views
COMMUNITIES_VIEW_NAME = "communities-view-name"  # the name to save the view under
COMMUNITIES_SAVE_VIEW = "communities-save-view"  # button: save the view on screen under the name
COMMUNITIES_DELETE_VIEW = "communities-delete-view"  # button: delete the chosen saved view
COMMUNITIES_VIEWS_MESSAGE = "communities-views-message"
COMMUNITIES_WHOLE_MIN_DEGREE = "communities-whole-min-degree"  # the whole graph's filter: least degree
COMMUNITIES_WHOLE_MAX_DEGREE = "communities-whole-max-degree"  # ... greatest degree
COMMUNITIES_WHOLE_MIN_FLOW = "communities-whole-min-flow"  # ... least flow
COMMUNITIES_WHOLE_CORE = "communities-whole-core"  # ... the k of a k-core
COMMUNITIES_WHOLE_LARGEST = "communities-whole-largest"  # ... the largest component only (a checklist)
COMMUNITIES_WHOLE_CENTRE = "communities-whole-centre"  # ... an ego network's clone (filled by a click on a clone)
COMMUNITIES_WHOLE_STEPS = "communities-whole-steps"  # ... its steps
COMMUNITIES_WHOLE_FILTER = "communities-whole-filter"  # button: apply the filter
COMMUNITIES_WHOLE_UNFILTER = "communities-whole-unfilter"  # button: show every clone again
COMMUNITIES_WHOLE_FILTERS = "communities-whole-filters"  # html.Details: the filter's fields, open while one is set
COMMUNITIES_WHOLE_EXPORT = "communities-whole-export"  # button: the clones shown as a GraphML file
COMMUNITIES_WHOLE_PNG = "communities-whole-png"  # button: the canvas as a PNG image
COMMUNITIES_WHOLE_DOWNLOAD = "communities-whole-download"  # store: the download link of the clones shown
COMMUNITIES_WHOLE_EXPORT_NOTE = "communities-whole-export-note"
COMMUNITIES_WHOLE_REQUEST = "communities-whole-request"  # store: what the whole graph's job is asked to draw
COMMUNITIES_WHOLE_BUSY = "communities-whole-busy"  # shown while the whole graph's job runs
COMMUNITIES_WHOLE_CANCEL = "communities-whole-cancel"  # button (in it): stop the whole graph's job
COMMUNITIES_WHOLE_COLOUR = "communities-whole-colour"  # what the whole graph's colours map
COMMUNITIES_WHOLE_SIZE = "communities-whole-size"  # what its clone sizes map
COMMUNITIES_WHOLE_LEGEND = "communities-whole-legend"  # its legend
COMMUNITIES_WHOLE_FILTER_SPEC = "communities-whole-filter-spec"  # store: the filter applied, as the URL writes it
COMMUNITIES_WHOLE_SHOWN = "communities-whole-shown"  # store: the clones the filter keeps (None: all)
COMMUNITIES_WHOLE_FILTER_NOTE = "communities-whole-filter-note"  # what the filter keeps, in a sentence

# Compare page
COMPARE_LEARNERS = "compare-learners"
COMPARE_CORPUS = "compare-corpus"
COMPARE_UNIT = "compare-unit"  # what one symbol is for every learner: characters, words or tokens
COMPARE_TABLE = "compare-table"
COMPARE_TABLE_CSV = "compare-table-csv"
COMPARE_CHART = "compare-chart"
COMPARE_SETTING = "compare-setting"  # pattern-matching type: {"learner": kind, "option": name}
COMPARE_ESTIMATE = "compare-estimate"
COMPARE_MAKE_CURRENT = "compare-make-current"

MODEL_WATCH = "model-watch"
NOTICE = "notice"  # the shell's line for a request job the server had to kill (app.jobs.read_notice)
NOTICE_SHOWN = "notice-shown"  # dcc.Store: the time of the notice shown
QUEUE_WATCH = "queue-watch"  # dcc.Interval in the app shell: every second while a job of this tab waits for a place
MODEL_STAMP = "model-stamp"

# Maps page (cognitive maps: a CHMM with actions learned from a walk in a room)
MAP_ROOM = "map-room"
MAP_ROOM_PREVIEW = "map-room-preview"
MAP_ROOM_MESSAGE = "map-room-message"
MAP_SOURCE = "map-source"
MAP_LENGTH = "map-length"
MAP_CLONES = "map-clones"
MAP_SEED = "map-seed"
MAP_RESTARTS = "map-restarts"
MAP_NOISE = "map-noise"
MAP_UPLOAD = "map-upload"
MAP_UPLOAD_MESSAGE = "map-upload-message"
MAP_EVIDENCE_UPLOAD = "map-evidence-upload"  # the uploaded walk's likelihood file (a sensor's soft evidence)
MAP_EVIDENCE_MESSAGE = "map-evidence-message"
MAP_EVIDENCE_FORGET = "map-evidence-forget"  # button: forget the likelihood file
MAP_VERSION = "map-version"  # dcc.Store: changes whenever the session's map is replaced (a job ended)
MAP_GRAPH = "map-graph"
MAP_SUMMARY = "map-summary"
MAP_COLOUR = "map-colour"
MAP_CLICK_SETS = "map-click-sets"
MAP_ROUTE_START = "map-route-start"
MAP_ROUTE_GOAL = "map-route-goal"
MAP_ROUTE = "map-route"  # dcc.Store: the planned route's clones
MAP_ROUTE_TEXT = "map-route-text"
MAP_FIELD = "map-field"
MAP_FIELD_NOTE = "map-field-note"
MAP_SELECTED = "map-selected"  # dcc.Store: the clone whose place field is shown
MAP_DOWNLOAD_MODEL = "map-download-model"
MAP_DOWNLOAD_GRAPHML = "map-download-graphml"
MAP_DOWNLOAD = "map-download"
MAP_EXPORT_MESSAGE = "map-export-message"
MAP_BLOCKED = "map-blocked"  # dropdown: the clones closed (no move enters them) for the detour
MAP_DETOUR = "map-detour"  # dcc.Store: the detour's clones (the route planned with the closed clones blocked)
MAP_DETOUR_TEXT = "map-detour-text"
SCHEMA_NAME = "schema-name"
SCHEMA_ADD = "schema-add"
SCHEMA_UPLOAD = "schema-upload"
SCHEMA_UPLOAD_MESSAGE = "schema-upload-message"
SCHEMA_LIBRARY = "schema-library"
SCHEMA_LIBRARY_MESSAGE = "schema-library-message"
SCHEMA_CLEAR = "schema-clear"
SCHEMA_LIBRARY_VERSION = "schema-library-version"  # dcc.Store: changes whenever the session's library changes
SCHEMA_CHART = "schema-chart"
SCHEMA_SENTENCE = "schema-sentence"
SCHEMA_MATCH_VERSION = "schema-match-version"  # dcc.Store: changes when a schema job ends (its result is drawn)
WATCH_SEEN = "watch-seen"  # what the tab's watch last saw of its session (app.main.session_change)
