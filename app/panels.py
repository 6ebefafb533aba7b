"""The app's job panels (:class:`app.jobs.panel.JobPanel`), one per kind of queued job a page runs: the Train page's
training, the Compare page's comparison and the Maps page's map and schema match. A panel is made from its kind alone
(its component ids are the kind's name and the part's word). They are built here, above the services that define the
kinds (:mod:`app.services.training_jobs`, :mod:`app.services.comparisons`, :mod:`app.services.maps`,
:mod:`app.services.map_schemas`), so that the panel machinery in :mod:`app.jobs` imports no service; the shell
(:mod:`app.main`) keeps every panel's stores and tends the queue for all of :data:`PANELS`."""

from __future__ import annotations

from app.jobs.panel import JobPanel
from app.services import comparisons, map_schemas, maps, training_jobs

TRAINING = JobPanel(training_jobs.TRAINING)
COMPARISON = JobPanel(comparisons.COMPARISON, keyed=False)
MAP = JobPanel(maps.MAP)
SCHEMA = JobPanel(map_schemas.SCHEMA)
PANELS = (TRAINING, COMPARISON, MAP, SCHEMA)
"""The job panels of the Train, Compare and Maps pages (the map and its schema match; in this order in the shell's
queue poll)."""
