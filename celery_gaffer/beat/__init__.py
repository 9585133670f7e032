"""Beat's side: each tick's work, from due schedules to published fires, and health.

:mod:`.tick` coordinates and reads forward: due schedules are decided (:mod:`.catchup`,
pure) and recorded in the ledger (:mod:`.dispatch`), published (:mod:`.publisher`, the
broker only) and marked (:mod:`.marking`); jittered fires are held and sent at their
time (:mod:`.held`, :mod:`.held_sender`); pending fires are republished; unconfirmed
deliveries are published again (:mod:`.redelivery`); lost runs are swept and health is
checked (:mod:`.checkup`, :mod:`.health`, :mod:`.metrics`); when the tick next wakes is
:mod:`.wake`'s (pure). :mod:`.triggers` publishes fires on demand (``gaffer trigger``,
``gaffer backfill``). SQL lives in :mod:`celery_gaffer.store`.
"""
