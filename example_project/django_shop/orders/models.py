"""The shop's own tables: ordinary managed Django models with their own migrations."""

from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        PAID = "paid"
        UNPAID = "unpaid"
        SHIPPED = "shipped"
        CANCELLED = "cancelled"

    customer = models.CharField(max_length=200)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.UNPAID)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.pk} ({self.status})"


class Shipment(models.Model):
    """One per shipped order: the effect that a duplicate delivery must not repeat."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="shipments")
    task_id = models.CharField(max_length=255)
    shipped_at = models.DateTimeField(auto_now_add=True)
