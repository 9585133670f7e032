"""The shop's URLs: the Django admin, where the "Gaffer" section shows the schedules,
runs and audit entries."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
