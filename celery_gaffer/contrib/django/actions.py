"""The admin's actions on schedules: pause with a note, resume, run now.

Each goes through :class:`~celery_gaffer.schedule_store.ScheduleStore`, as the command
line and the console do, writing the audit log with the Django user as the actor and
``admin`` as the source. An action needs the ``gaffer.change_schedule`` permission.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from ...cli.times import duration_of
from ...clock import utcnow
from ...exceptions import GafferError
from ...readable import parse_instant
from ...schedule_reads import NOTE_LENGTH
from ...schedule_store import ScheduleStore
from .conf import celery_app

SOURCE = "admin"
#: Names a message lists before "and N more".
SHOWN = 20


class PauseForm(forms.Form):  # type: ignore[misc]  # Django ships no type hints
    """A pause's note and, optionally, when Beat resumes the schedules by itself."""

    note = forms.CharField(
        max_length=NOTE_LENGTH, required=False, widget=forms.Textarea(attrs={"rows": 3})
    )
    until = forms.CharField(
        required=False,
        help_text="Resume by itself after a duration (2h, 30m, 1d) or at a time "
        "(2026-12-01T09:00Z; without an offset: UTC). Empty: until resumed.",
    )

    def clean_until(self) -> datetime | None:
        text = str(self.cleaned_data.get("until") or "").strip()
        if not text:
            return None
        duration = duration_of(text)
        if duration is not None:
            return utcnow() + duration
        try:
            return parse_instant(text)
        except ValueError as exc:
            raise forms.ValidationError(f"neither a duration (2h, 30m, 1d) nor {exc}") from exc


def store_for(request: Any) -> ScheduleStore:
    """A store writing as the request's Django user through the admin."""
    actor = request.user.get_username() or "anonymous"
    return ScheduleStore(celery_app(), check_tasks=False, actor=actor, audit_source=SOURCE)


def each(
    modeladmin: Any, request: Any, queryset: Any, verb: str, act: Callable[[str], object]
) -> None:
    """``act`` on each selected schedule's name; one message for those it did, one error
    message for each it could not (a GafferError's text)."""
    done = []
    for name in queryset.values_list("name", flat=True):
        try:
            act(name)
        except GafferError as exc:
            modeladmin.message_user(request, f"{name}: {exc}", messages.ERROR)
        else:
            done.append(name)
    if done:
        shown = ", ".join(done[:SHOWN]) + (
            f" and {len(done) - SHOWN} more" if len(done) > SHOWN else ""
        )
        modeladmin.message_user(request, f"{verb}: {shown}", messages.SUCCESS)


@admin.action(description="Pause with a note", permissions=["operate"])  # type: ignore[untyped-decorator]
def pause(modeladmin: Any, request: Any, queryset: Any) -> Any:
    """Ask for the note and the time to resume, then pause each selected schedule."""
    form = PauseForm(request.POST if "apply" in request.POST else None)
    if "apply" in request.POST and form.is_valid():
        store = store_for(request)
        note = form.cleaned_data["note"].strip() or None
        until = form.cleaned_data["until"]
        each(
            modeladmin,
            request,
            queryset,
            "paused",
            lambda name: store.pause(name, note=note, until=until),
        )
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Pause schedules",
        "form": form,
        "count": queryset.count(),
        "names": list(queryset.values_list("name", flat=True)[:100]),
        "select_across": request.POST.get("select_across") == "1",
        "pks": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "opts": modeladmin.opts,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    return TemplateResponse(request, "admin/gaffer/schedule/pause.html", context)


@admin.action(description="Resume", permissions=["operate"])  # type: ignore[untyped-decorator]
def resume(modeladmin: Any, request: Any, queryset: Any) -> None:
    store = store_for(request)
    each(modeladmin, request, queryset, "Resumed", store.resume)


@admin.action(description="Run now", permissions=["operate"])  # type: ignore[untyped-decorator]
def run_now(modeladmin: Any, request: Any, queryset: Any) -> None:
    store = store_for(request)
    each(modeladmin, request, queryset, "Sent one fire of", store.trigger)
