"""A Django app of the tests' own: the rows that tasks write with Django's ORM."""
