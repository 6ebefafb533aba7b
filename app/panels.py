"""The app's job panels (:class:`app.jobs.panel.JobPanel`), one per kind of queued job a page runs: the Train page's
training, the Compare page's comparison and the Maps page's map and schema match. Each is built here, above the
services that define the kinds (:mod:`app.services.training_jobs`, :mod:`app.services.comparisons`,
:mod:`app.services.maps`, :mod:`app.services.map_schemas`), so that the panel machinery in :mod:`app.jobs` imports no
service; the shell (:mod:`app.main`) keeps every panel's stores and tends the queue for all of :data:`PANELS`."""

from __future__ import annotations

from app import ids
from app.jobs import panel
from app.services import comparisons, map_schemas, maps, training_jobs


def _panels() -> tuple[panel.JobPanel, panel.JobPanel, panel.JobPanel, panel.JobPanel]:
    training = panel.JobPanel(
        training_jobs.TRAINING, ids.TRAIN_START, ids.TRAIN_CANCEL, ids.TRAIN_STATUS, ids.TRAIN_PROGRESS,
        ids.TRAIN_PROGRESS_LABEL,
        ids.TRAINING_FLAG, ids.TRAINING_PROGRESS, ids.TRAIN_RESULT, ids.TRAIN_QUEUED, ids.TRAIN_GO,
    )  # fmt: skip
    comparison = panel.JobPanel(
        comparisons.COMPARISON, ids.COMPARE_START, ids.COMPARE_CANCEL, ids.COMPARE_MESSAGE, ids.COMPARE_PROGRESS,
        ids.COMPARE_PROGRESS_LABEL,
        ids.COMPARING_FLAG, ids.COMPARING_PROGRESS, ids.COMPARE_RESULT, ids.COMPARE_QUEUED, ids.COMPARE_GO,
        keyed=False,
    )  # fmt: skip
    mapping = panel.JobPanel(
        maps.MAP, ids.MAP_START, ids.MAP_CANCEL, ids.MAP_STATUS, ids.MAP_PROGRESS, ids.MAP_PROGRESS_LABEL,
        ids.MAPPING_FLAG, ids.MAPPING_PROGRESS, ids.MAP_RESULT, ids.MAP_QUEUED, ids.MAP_GO,
    )  # fmt: skip
    matching = panel.JobPanel(
        map_schemas.SCHEMA, ids.SCHEMA_START, ids.SCHEMA_CANCEL, ids.SCHEMA_STATUS, ids.SCHEMA_PROGRESS,
        ids.SCHEMA_PROGRESS_LABEL,
        ids.MATCHING_FLAG, ids.MATCHING_PROGRESS, ids.SCHEMA_RESULT, ids.SCHEMA_QUEUED, ids.SCHEMA_GO,
    )  # fmt: skip
    return training, comparison, mapping, matching


TRAINING, COMPARISON, MAP, SCHEMA = _panels()
"""The job panels of the Train, Compare and Maps pages (the map and its schema match; in this order in the shell's
queue poll)."""
PANELS = (TRAINING, COMPARISON, MAP, SCHEMA)
