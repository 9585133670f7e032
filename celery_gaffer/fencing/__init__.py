"""The worker's write path: a run's context, its fenced leases and its sealed commits.

:mod:`.context` is one delivery's state while it runs; :mod:`.leases` and
:mod:`.renewer` hold and renew its fenced leases; :mod:`.sessions` hooks every commit of
the run's sessions, and :mod:`.seal` decides what each commit checks and claims;
:mod:`.batches` runs bounded, resumable batches on top. SQL lives in
:mod:`celery_gaffer.store` (:mod:`~celery_gaffer.store.leases`,
:mod:`~celery_gaffer.store.keys`, :mod:`~celery_gaffer.store.cursors`).
"""
