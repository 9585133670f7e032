"""Signals sent by Beat's health check (``sender`` is the schedule's name).

Connect a receiver to page someone:

```python
from celery_gaffer.signals import job_late

@job_late.connect
def page(sender, health, **kwargs):
    ...
```

Each is sent once per change of a schedule's state, with ``health`` (a
``Health``) and ``previous`` (the state word before).
"""

from __future__ import annotations

from celery.utils.dispatch import Signal

job_late = Signal(name="job_late", providing_args={"health", "previous"})
job_failing = Signal(name="job_failing", providing_args={"health", "previous"})
job_recovered = Signal(name="job_recovered", providing_args={"health", "previous"})

__all__ = ["job_failing", "job_late", "job_recovered"]
