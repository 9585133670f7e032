"""The admin of the Gaffer tables: schedules (with their next fires and audit history),
runs and the audit log, read-only; schedules change only through the actions of
:mod:`.actions`, which go through ``ScheduleStore``.

Rows are read on the Django alias of ``gaffer_database_url = "django://<alias>"``
(``get_queryset`` calls ``using(alias)``); with any other URL the admin cannot read the
tables and says so (system check ``gaffer.W003`` too). A changelist page is one query
for its rows (the last run's state a correlated subquery) and one count.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import OuterRef, Q, Subquery

from ...exceptions import GafferError
from ...protocol import STORED_HEALTH, RunState
from ...schedules.calendars import CalendarView
from ...schedules.display import describe, when, zone_of
from ...schedules.kinds import Schedule as GafferSchedule
from ...schedules.kinds import schedule_from_dict
from ...schedules.upcoming import calendar_view, first_listed, upcoming, with_known_dates
from ...store.audit import SOURCES
from . import actions
from .conf import gaffer_alias
from .models import AuditEntry, JobRun, Schedule

NEXT_FIRES = 5
HISTORY = 20
AUDIT_ACTIONS = (
    "add",
    "replace",
    "update",
    "pause",
    "resume",
    "trigger",
    "backfill",
    "remove",
    "error",
    "recover",
)
UNREADABLE = (
    "the admin reads the Gaffer tables through Django: set CELERY_GAFFER_DATABASE_URL = "
    '"django://default" (any alias of DATABASES)'
)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django ships no type hints
    """Rows of a Gaffer table on the Gaffer alias, never added, changed or deleted here."""

    show_full_result_count = False
    list_per_page = 100

    def get_queryset(self, request: Any) -> Any:
        alias = gaffer_alias()
        queryset = super().get_queryset(request)
        return queryset.none() if alias is None else queryset.using(alias)

    def changelist_view(self, request: Any, extra_context: Any = None) -> Any:
        if gaffer_alias() is None:
            self.message_user(request, UNREADABLE, messages.ERROR)
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class StateFilter(admin.SimpleListFilter):  # type: ignore[misc]
    title = "state"
    parameter_name = "state"
    STATES = {
        "enabled": Q(error__isnull=True, enabled=True, next_fire_at__isnull=False),
        "paused": Q(error__isnull=True, enabled=False),
        "error": Q(error__isnull=False),
        "done": Q(error__isnull=True, enabled=True, next_fire_at__isnull=True),
    }

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, state) for state in self.STATES]

    def queryset(self, request: Any, queryset: Any) -> Any:
        condition = self.STATES.get(self.value() or "")
        return queryset if condition is None else queryset.filter(condition)


def choices(field: str, values: tuple[str, ...]) -> type[admin.SimpleListFilter]:
    """A filter on ``field`` offering fixed ``values`` (Django's default filter of a text
    column would read every distinct value of the table)."""

    class Choices(admin.SimpleListFilter):  # type: ignore[misc]
        title = field
        parameter_name = field

        def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
            return [(value, value) for value in values]

        def queryset(self, request: Any, queryset: Any) -> Any:
            value = self.value()
            return queryset.filter(**{field: value}) if value in values else queryset

    return Choices


def _schedule(row: Schedule) -> GafferSchedule | None:
    try:
        return schedule_from_dict(row.schedule)
    except (GafferError, ValueError, TypeError, AttributeError):
        return None


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    list_display = ("name", "when", "zone", "state_and_reason", "next_fire", "health", "last_run")
    list_filter = (
        StateFilter,
        choices("health", tuple(STORED_HEALTH)),
        choices("source", ("db", "config")),
    )
    search_fields = ("name",)
    actions = (actions.pause, actions.resume, actions.run_now)
    fields = (
        ("name", "task", "source"),
        ("when", "state_and_reason"),
        ("next_fire_at", "paused_until", "health"),
        ("args", "kwargs", "options"),
        ("catchup", "starting_deadline", "overlap", "grace"),
        ("start_at", "end_at", "max_runs", "fired_count"),
        ("watermark_at", "last_success_at", "consecutive_failures"),
        ("created_at", "updated_at"),
    )
    change_form_template = "admin/gaffer/schedule/change_form.html"

    def get_changelist(self, request: Any, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return [name for row in self.fields for name in row]

    def get_actions(self, request: Any) -> Any:
        found = super().get_actions(request)
        found.pop("delete_selected", None)
        return found

    def has_operate_permission(self, request: Any) -> bool:
        """Whether the user may pause, resume and run schedules."""
        return bool(request.user.has_perm("gaffer.change_schedule"))

    @admin.display(description="when")  # type: ignore[untyped-decorator]
    def when(self, row: Schedule) -> str:
        return describe(_schedule(row))

    @admin.display(description="zone")  # type: ignore[untyped-decorator]
    def zone(self, row: Schedule) -> str:
        definition: dict[str, Any] = row.schedule if isinstance(row.schedule, dict) else {}
        return str(definition.get("tz") or "UTC")

    @admin.display(description="state")  # type: ignore[untyped-decorator]
    def state_and_reason(self, row: Schedule) -> str:
        if row.state == "error":
            return f"error: {row.error}"
        if row.state == "paused":
            until = f" until {when(row.paused_until)}" if row.paused_until else ""
            return f"paused{until}" + (f": {row.paused_note}" if row.paused_note else "")
        return str(row.state)

    @admin.display(description="next fire", ordering="next_fire_at")  # type: ignore[untyped-decorator]
    def next_fire(self, row: Schedule) -> str:
        return when(row.next_fire_at, zone_of(_schedule(row)))

    @admin.display(description="last run")  # type: ignore[untyped-decorator]
    def last_run(self, row: Schedule) -> str:
        return str(getattr(row, "last_run_state", None) or "-")

    def change_view(
        self, request: Any, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        context = dict(extra_context or {})
        row = self.get_object(request, object_id)
        if row is not None:
            context["next_fires"] = next_fires(row, request)
            context["history"] = list(
                AuditEntry.objects.using(gaffer_alias())
                .filter(schedule=row.name)
                .order_by("-id")[:HISTORY]
            )
        return super().change_view(request, object_id, form_url, context)


class ScheduleChangeList(ChangeList):  # type: ignore[misc]
    """The schedules of a page with the state of each one's latest scheduled run, read in
    one more query for the page's rows only (a subquery in the page's own query would run
    for every row an OFFSET skips)."""

    result_list: Any

    def get_results(self, request: Any) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        if rows:
            latest = (
                JobRun.objects.filter(schedule=OuterRef("name"), nominal_at__isnull=False)
                .order_by("-nominal_at")
                .values("state")[:1]
            )
            states = dict(
                self.root_queryset.filter(pk__in=[row.pk for row in rows])
                .annotate(last_run_state=Subquery(latest))
                .values_list("pk", "last_run_state")
            )
            for row in rows:
                row.last_run_state = states.get(row.pk)
        self.result_list = rows


def next_fires(row: Schedule, request: Any) -> list[str]:
    """The schedule's next fires, in its zone and UTC (or why it has none), each one its
    calendars skip or move with the reason; for a paused one, what resuming it now would
    do (the store's preview)."""
    schedule = _schedule(row)
    if row.state in ("paused", "error"):
        try:
            preview = actions.store_for(request).preview_resume(row.name)
        except GafferError as exc:
            return [f"not resumable now: {exc}"]
        zone = zone_of(schedule)
        return [f"if resumed now: {preview.summary}", *(when(fire, zone) for fire in preview.fires)]
    if schedule is None or row.next_fire_at is None:
        return ["no fire to come"]
    zone = zone_of(schedule)
    view = _calendar_of(actions.store_for(request), row.name, schedule)
    # From the fire before the next one when its calendar skipped or moved it (listed
    # with the reason, as the console and ``explain`` list it).
    start = first_listed(view, row.watermark_at, row.next_fire_at, row.start_at)
    return [
        when(fire.at, zone) + ("" if fire.reason is None else f" (calendar: {fire.reason})")
        for fire in upcoming(view, schedule, start, NEXT_FIRES)
    ]


def _calendar_of(store: Any, name: str, schedule: GafferSchedule) -> CalendarView | None:
    """The schedule seen through its ``skip_on`` calendars (their dates read once)."""
    try:
        rule = store.get(name).policy.bounds.calendar
    except GafferError:
        return None  # removed since the page's query
    if rule is not None and rule.stored_names:
        rule = with_known_dates(rule, store.calendars())
    return calendar_view(schedule, rule)


@admin.register(JobRun)
class RunAdmin(ReadOnlyAdmin):
    list_display = (
        "task_id",
        "state",
        "schedule",
        "task_name",
        "nominal_at",
        "started_at",
        "finished_at",
        "duration",
        "attempt",
    )
    list_filter = (choices("state", tuple(RunState)),)
    search_fields = ("=schedule", "=task_id")


@admin.register(AuditEntry)
class AuditAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "source", "action", "schedule", "note", "changes")
    list_filter = (choices("source", SOURCES), choices("action", AUDIT_ACTIONS))
    search_fields = ("=schedule", "=actor")
