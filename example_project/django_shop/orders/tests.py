"""The shop's tasks under Django's test runner (``python manage.py test``).

``self.atomic()`` opens the transaction itself, so these are ``TransactionTestCase``s
(a ``TestCase`` wraps each test in a transaction, inside which ``self.atomic()`` is
refused). The test database gets the Gaffer tables from Django's own migrate
(``GAFFER_MIGRATE_WITH_DJANGO`` in settings.py); on SQLite, settings.py gives it a file
(``TEST["NAME"]``), which Gaffer's engine opens on connections of its own.
"""

from __future__ import annotations

from django.test import TransactionTestCase

from .models import Order, Shipment
from .tasks import ship_order


class ShipOrderTests(TransactionTestCase):
    def test_a_second_delivery_ships_nothing_more(self) -> None:
        order = Order.objects.create(customer="ada")
        assert ship_order.apply(args=(order.pk,)).get() == f"shipped order {order.pk}"
        assert ship_order.apply(args=(order.pk,)).get() is None  # a duplicate
        assert Shipment.objects.filter(order=order).count() == 1
