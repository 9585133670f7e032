"""Importers: schedules from other schedulers into Gaffer (``gaffer import ...``)."""
