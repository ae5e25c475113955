from django.db import models


class Order(models.Model):
    ref = models.CharField(max_length=36, unique=True)  # the client's reference
    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)


class Receipt(models.Model):
    """Written by the task: what it saw of the order when it ran."""

    ref = models.CharField(max_length=36, unique=True)
    order_found = models.BooleanField()
    order_paid = models.BooleanField()
    sent_at = models.DateTimeField(auto_now_add=True)
