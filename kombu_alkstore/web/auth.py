"""Write access and CSRF protection for the dashboard.

Read-only unless a token is configured. With one, a client gets write access by HTTP
Basic auth (any user name, the token as password: the browser's own prompt, reached at
``/login``) or ``Authorization: Bearer <token>``. Every action is a POST that carries a
CSRF token bound to those credentials (an HMAC under a per-process secret), and whose
``Origin``, when sent, is this server.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request


class Auth:
    """Who may write, and the CSRF tokens of those who may."""

    realm = "kombu-alkstore"

    def __init__(self, token: str | None, secret: bytes | None = None) -> None:
        self.token = token or None
        self.secret = secret or secrets.token_bytes(32)

    @property
    def writable(self) -> bool:
        """Whether write access is configured at all."""
        return self.token is not None

    def credential(self, request: Request) -> str | None:
        """The token the request presents (Basic password or Bearer), if any."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return value.strip()
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return decoded.partition(":")[2]
        return None

    def actor_name(self, request: Request) -> str:
        """Who acts, for the acts on record (store/acts.py): ``web:<user>`` with the user
        name of HTTP Basic auth (as the client gave it: the token is what authenticates),
        ``web:token`` for a Bearer token or an empty user name. Control characters are
        dropped and the name cut to fit an act's actor."""
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        user = ""
        if scheme.lower() == "basic":
            try:
                user = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                user = ""
            user = user.partition(":")[0]
        user = "".join(c for c in user if ord(c) >= 32 and ord(c) != 127).strip()
        return f"web:{user or 'token'}"[:200]

    def may_write(self, request: Request) -> bool:
        """True when write access is configured and the request presents the token."""
        if self.token is None:
            return False
        given = self.credential(request)
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def csrf_token(self, request: Request) -> str:
        """The CSRF token for this client's credentials ('' for a read-only client)."""
        if not self.may_write(request):
            return ""
        ident = hashlib.sha256((self.credential(request) or "").encode()).digest()
        return hmac.new(self.secret, b"csrf:" + ident, hashlib.sha256).hexdigest()

    def check_post(self, request: Request, form_token: str | None) -> str | None:
        """Why a POST is refused (None: allowed): no write access, a foreign origin, or
        a missing or wrong CSRF token."""
        if not self.may_write(request):
            return "read-only: write access needs the dashboard token"
        origin = request.headers.get("origin")
        if origin and origin != "null":
            host = request.headers.get("host", "")
            if urlsplit(origin).netloc != host:
                return "cross-origin request refused"
        expected = self.csrf_token(request)
        if not form_token or not hmac.compare_digest(form_token, expected):
            return "missing or invalid CSRF token"
        return None
