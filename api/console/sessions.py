"""Server-side sessions for the web console, as a Flask session interface.

The cookie holds only a random id; the session's data lives in Redis
(:class:`shared.access.tokens.SessionStore`), so logging out, going idle or revoking the
token the session was opened with ends it for good: a saved copy of the cookie
names nothing.  The data is serialised as Flask serialises its own cookie sessions.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, Request, Response
from flask.json.tag import TaggedJSONSerializer
from flask.sessions import SessionInterface, SessionMixin
from werkzeug.datastructures import CallbackDict

from shared.access.tokens import SessionStore

SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # what SessionStore.new_id makes


class ServerSession(CallbackDict[str, Any], SessionMixin):
    def __init__(self, data: dict[str, Any] | None = None, sid: str | None = None) -> None:
        def changed(_: Any) -> None:
            self.modified = True

        super().__init__(data, changed)
        self.sid = sid
        self.ended: list[str] = []  # ids this request retired (logout, login)
        self.modified = False

    def renew(self) -> None:
        """Retire this session's id; the next save stores the data under a new one."""
        if self.sid is not None:
            self.ended.append(self.sid)
        self.sid = None
        self.modified = True


def renew(session: SessionMixin) -> None:
    """Start over with a fresh, empty session under a new id (login, logout)."""
    session.clear()
    if isinstance(session, ServerSession):
        session.renew()


class RedisSessions(SessionInterface):
    serializer = TaggedJSONSerializer()

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    def open_session(self, app: Flask, request: Request) -> ServerSession:
        sid = request.cookies.get(self.get_cookie_name(app), "")
        data = self.store.load(sid) if SESSION_ID.fullmatch(sid) else None
        if data is None:
            return ServerSession()
        return ServerSession(self.serializer.loads(data), sid)

    def save_session(self, app: Flask, session: SessionMixin,
                     response: Response) -> None:
        assert isinstance(session, ServerSession)
        for sid in session.ended:
            self.store.end(sid)
        if not session:  # nothing to keep: no record, no cookie
            if session.sid is not None:
                self.store.end(session.sid)
            if session.ended or session.sid is not None:
                response.delete_cookie(self.get_cookie_name(app),
                                       domain=self.get_cookie_domain(app),
                                       path=self.get_cookie_path(app))
            return
        if not session.modified:
            return
        session.sid = session.sid or self.store.new_id()
        who = session.get("who")
        token_id = str(who["id"]) if isinstance(who, dict) and "id" in who else None
        self.store.save(session.sid, self.serializer.dumps(dict(session)), token_id)
        response.set_cookie(self.get_cookie_name(app), session.sid,
                            httponly=self.get_cookie_httponly(app),
                            secure=self.get_cookie_secure(app),
                            samesite=self.get_cookie_samesite(app),
                            domain=self.get_cookie_domain(app),
                            path=self.get_cookie_path(app))
