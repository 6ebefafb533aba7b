"""The CHMM Explorer web app (Dash, ``use_pages``): thin pages over the engine's services
(:mod:`engine.training`, :mod:`engine.api`).

Layout: ``main`` builds the Dash app (``server`` for gunicorn), ``pages/`` holds one module per page, ``ids`` the
component ids, ``config`` the settings read from the environment, ``sessions`` the per-session folders,
``jobs`` the background training job, ``services`` the plain functions the callbacks call (tested directly) and
``figures`` the plotly figures. Nothing here does numerics: every computation is an ``engine`` call.
"""
