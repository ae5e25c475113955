"""Versioned migrations per engine: numbered ``.sql`` files applied in order.

(Placeholder: the runner is being written; see issue 15.)
"""
