"""Run records: one ``gaffer_job_runs`` row per delivery, written by signal receivers.

:mod:`.recorder` holds the receivers that :func:`celery_gaffer.install` connects;
:mod:`.delivery` the one object a delivery's run and receivers share; :mod:`.overlap` the
overlap lease taken with the start record and freed with the end record;
:mod:`.heartbeat` keeps running rows fresh so that Beat can tell a lost run.
"""
