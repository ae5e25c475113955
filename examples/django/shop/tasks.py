from celery import shared_task

from .models import Order, Receipt


@shared_task
def send_receipt(ref: str) -> bool:
    """Send the order's receipt (here: record what the task found).

    Published inside the order's transaction, it runs after the commit, so it always finds
    the order, already paid. Published the usual way (before the commit), it could run
    first and find nothing, or find the order unpaid.
    """
    order = Order.objects.filter(ref=ref).first()
    Receipt.objects.get_or_create(  # at-least-once delivery: a second run changes nothing
        ref=ref,
        defaults={"order_found": order is not None, "order_paid": bool(order and order.paid)},
    )
    return order is not None
