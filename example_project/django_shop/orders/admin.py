from django.contrib import admin

from .models import Order, Shipment

admin.site.register(Order)
admin.site.register(Shipment)
