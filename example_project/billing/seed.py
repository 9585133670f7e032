"""Create the invoices table and seed it once (running it again changes nothing)."""

from __future__ import annotations

import random
from datetime import date, timedelta

from sqlalchemy import func, select

from celery_gaffer.store import database_for

from .celery_app import app
from .models import Base, Invoice

CUSTOMERS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell")


def seed(count: int = 400) -> int:
    database = database_for(app)
    Base.metadata.create_all(database.engine)
    with database.session() as session:
        if session.scalar(select(func.count()).select_from(Invoice)):
            return 0
        rng = random.Random(7)
        today = date.today()
        session.add_all(
            Invoice(
                id=n,
                customer=rng.choice(CUSTOMERS),
                amount=round(rng.uniform(20, 2000), 2),
                due_on=today + timedelta(days=rng.randint(-20, 10)),
            )
            for n in range(1, count + 1)
        )
        session.commit()
    return count


if __name__ == "__main__":
    print(f"seeded {seed()} invoices")
