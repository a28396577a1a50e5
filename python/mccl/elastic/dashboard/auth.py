"""Who may read the status page.

With a job secret in the serving process's environment (MCCL_SECRET_FILE or
MCCL_SECRET), every page, /api/fleet and /metrics ask for the operator's
token (`mccl secret --token`: an HMAC of the secret, mccl.secret.status_token):
as `Authorization: Bearer <token>`, as the cookie this module sets, or once
as `?token=<token>` (answered with the cookie and a redirect to the same
address without it, so the token leaves the address bar and the history).
Tokens are compared in constant time. /healthz and the static assets (no
fleet data in them) are open. Without a job secret the page is open to
whoever reaches its port, as the store itself is (docs/security.md).
"""

from __future__ import annotations

import hmac
from http.cookies import CookieError, SimpleCookie

COOKIE = "mccl_token"


class Access:
    def __init__(self, token: str | None):
        self.token = token

    @staticmethod
    def from_env(env=None) -> "Access":
        """Raises ValueError when the environment names a bad secret."""
        from mccl.secret import job_secret, status_token
        secret = job_secret(env)
        return Access(status_token(secret) if secret is not None else None)

    @property
    def required(self) -> bool:
        return self.token is not None

    def _same(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.strip().encode(), self.token.encode())

    def allows(self, headers, query_token: str | None) -> bool:
        if self.token is None:
            return True
        auth = headers.get("Authorization", "")
        if auth[:7].lower() == "bearer " and self._same(auth[7:]):
            return True
        if query_token is not None and self._same(query_token):
            return True
        try:
            jar = SimpleCookie(headers.get("Cookie", ""))
        except CookieError:
            return False
        return COOKIE in jar and self._same(jar[COOKIE].value)

    def cookie(self) -> str:
        return f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=2592000"
