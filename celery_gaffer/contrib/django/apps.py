"""``GafferConfig``: the app ``"celery_gaffer.contrib.django"`` of ``INSTALLED_APPS``."""

from __future__ import annotations

from django.apps import AppConfig


class GafferConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    """The Gaffer app: the ``gaffer`` management command, the system checks, and the
    admin's read-only models of the Gaffer tables (unmanaged: Alembic owns them)."""

    name = "celery_gaffer.contrib.django"
    label = "gaffer"
    verbose_name = "Gaffer"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from .checks import check_configuration, check_tables

        checks.register(check_configuration, "gaffer")
        checks.register(check_tables, checks.Tags.database)

        from django.db.models.signals import post_migrate

        from .tables import migrate_gaffer_tables

        post_migrate.connect(
            migrate_gaffer_tables, sender=self, dispatch_uid="celery_gaffer.migrate_tables"
        )
