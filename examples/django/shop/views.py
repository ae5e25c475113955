import uuid

from django.http import JsonResponse
from django.views.decorators.http import require_GET, require_POST

import kombu_alkstore.django

from .models import Order, Receipt
from .tasks import send_receipt


class PaymentDeclined(Exception):
    pass


def charge(order: Order, card: str) -> None:
    """Stands in for the payment provider's API."""
    if card == "declined":
        raise PaymentDeclined(f"card declined for order {order.ref}")


@require_POST
def place_order(request):
    """POST item=…[&card=declined][&ref=…]: the order, its payment and its receipt task
    commit together, or none of them does."""
    ref = request.POST.get("ref") or str(uuid.uuid4())
    try:
        # transaction.atomic() with the publishes bound to Django's connection: the task is
        # a row in this transaction, invisible to workers until the commit.
        with kombu_alkstore.django.atomic():
            order = Order.objects.create(ref=ref, item=request.POST["item"])
            send_receipt.delay(ref)
            charge(order, request.POST.get("card", ""))
            order.paid = True
            order.save(update_fields=["paid"])
    except PaymentDeclined as exc:  # rolled back: no order, no task
        return JsonResponse({"ref": ref, "error": str(exc)}, status=402)
    return JsonResponse({"ref": ref, "paid": True}, status=201)


@require_GET
def order_status(request, ref):
    """The order and its receipt, as the worker wrote it (null until the task has run)."""
    order = Order.objects.filter(ref=ref).first()
    receipt = Receipt.objects.filter(ref=ref).first()
    return JsonResponse(
        {
            "ref": ref,
            "order": None if order is None else {"item": order.item, "paid": order.paid},
            "receipt": None
            if receipt is None
            else {"order_found": receipt.order_found, "order_paid": receipt.order_paid},
        }
    )
