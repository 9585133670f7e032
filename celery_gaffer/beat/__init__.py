"""Beat's side: each tick's work, from due schedules to published fires, and health.

:mod:`.tick` reads forward: due schedules are decided (:mod:`.catchup`, pure), recorded
in the ledger and published (:mod:`.publisher`); pending fires are republished;
unconfirmed deliveries are published again (:mod:`.redelivery`); lost runs are swept and
health is checked (:mod:`.health`, :mod:`.metrics`). :mod:`.triggers` publishes fires on
demand (``gaffer trigger``, ``gaffer backfill``). SQL lives in :mod:`celery_gaffer.store`.
"""
