"""Basic auth: its caches, its bounded wait for bcrypt, and the endpoint under a flood of wrong passwords."""

from __future__ import annotations

import base64
import collections
import http.client
import itertools
import threading
import time
from pathlib import Path

import bcrypt
import pytest

import collector.webconfig as webconfig
from collector.webconfig import BasicAuth
from tests.collector.pki import bcrypt_hash
from tests.collector.web import PASSWORD, REFUSED, basic, get, write


class CountingBcrypt:
    """Counts bcrypt.checkpw calls (the expensive part) while still running them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = bcrypt.checkpw

        def checkpw(password: bytes, hashed: bytes) -> bool:
            self.calls += 1
            return real(password, hashed)

        monkeypatch.setattr(webconfig.bcrypt, "checkpw", checkpw)


def test_basic_auth_accepts_only_the_right_password(hashed: str) -> None:
    users = {"prometheus": hashed.encode()}
    auth = BasicAuth()
    assert auth.check(users, basic("prometheus", PASSWORD))
    assert auth.check(users, "basic " + basic("prometheus", PASSWORD)[6:]), "the scheme is case-insensitive"
    assert not auth.check(users, basic("prometheus", PASSWORD + "x"))
    assert not auth.check(users, basic("grafana", PASSWORD))
    assert not auth.check(users, None)
    assert not auth.check(users, "Bearer abc")
    assert not auth.check(users, "Basic !!!not-base64")
    assert not auth.check(users, "Basic " + base64.b64encode(b"no-colon").decode())
    assert not auth.check(users, "Basic " + base64.b64encode(b"\xff:x").decode())
    assert not auth.check({}, basic("prometheus", PASSWORD))


def test_verified_credentials_are_cached(monkeypatch: pytest.MonkeyPatch, hashed: str) -> None:
    users = {"prometheus": hashed.encode()}
    auth, counter = BasicAuth(), CountingBcrypt(monkeypatch)
    for _ in range(5):
        assert auth.check(users, basic("prometheus", PASSWORD))
    assert counter.calls == 1, "a scrape does not pay bcrypt once the password is known"
    for _ in range(3):
        assert not auth.check(users, basic("prometheus", "wrong"))
    assert counter.calls == 2, "a repeated wrong password is cached as wrong"
    new_hash = bcrypt_hash("rotated").encode()
    assert not auth.check({"prometheus": new_hash}, basic("prometheus", PASSWORD)), "a new hash is a new check"
    assert counter.calls == 3
    for i in range(BasicAuth.FAILURE_CACHE_SIZE + 10):
        auth.check(users, basic("prometheus", f"guess{i}"))
    assert len(auth._failed) == BasicAuth.FAILURE_CACHE_SIZE, "the cache is bounded"
    for i in range(BasicAuth.CACHE_SIZE + 10):
        assert auth.check({f"u{i}": hashed.encode()}, basic(f"u{i}", PASSWORD))
    assert len(auth._ok) == BasicAuth.CACHE_SIZE, "so is the cache of successes"
    assert all(len(k) == 32 for k in [*auth._ok, *auth._failed]), "the cache keys are HMAC digests, not passwords"


def test_unknown_user_pays_bcrypt_at_the_users_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []
    real = bcrypt.checkpw
    monkeypatch.setattr(webconfig.bcrypt, "checkpw", lambda p, h: seen.append(h) or real(p, h))
    users = {"prometheus": bcrypt_hash(PASSWORD, cost=5).encode()}
    assert not BasicAuth().check(users, basic("intruder", PASSWORD))
    assert len(seen) == 1 and seen[0].startswith(b"$2y$05$"), "no timing difference between unknown and wrong"


def test_passwords_beyond_72_bytes_are_truncated_like_htpasswd() -> None:
    long = "p" * 72
    users = {"u": bcrypt_hash(long).encode()}
    assert BasicAuth().check(users, basic("u", long + "ignored by bcrypt"))


def test_concurrent_scrapes_with_auth(tmp_path: Path, hashed: str, serve) -> None:
    web = write(tmp_path / "web.yml", f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    srv = serve(web)
    url = f"http://127.0.0.1:{srv.port}/metrics"
    codes: list[int] = []
    threads = [
        threading.Thread(target=lambda: codes.append(get(url, basic("prometheus", PASSWORD))[0])) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 8


def test_wrong_passwords_never_evict_a_verified_one(monkeypatch: pytest.MonkeyPatch, hashed: str) -> None:
    """64 clients of wrong passwords filled the one cache of both outcomes: the valid scrape paid bcrypt again."""
    users = {"prometheus": hashed.encode()}
    auth, counter = BasicAuth(), CountingBcrypt(monkeypatch)
    assert auth.check(users, basic("prometheus", PASSWORD))
    for i in range(3 * BasicAuth.CACHE_SIZE):
        assert not auth.check(users, basic("prometheus", f"guess{i}"))
    calls = counter.calls
    assert auth.check(users, basic("prometheus", PASSWORD))
    assert counter.calls == calls, "the verified password is still known: no bcrypt for it"


def test_waiting_for_bcrypt_is_bounded_and_known_passwords_never_wait(
    monkeypatch: pytest.MonkeyPatch, hashed: str
) -> None:
    users = {"prometheus": hashed.encode()}
    auth = BasicAuth()
    assert auth.check(users, basic("prometheus", PASSWORD))
    running, release = threading.Event(), threading.Event()
    real = bcrypt.checkpw

    def stuck(password: bytes, h: bytes) -> bool:  # a hash that takes as long as the test says
        running.set()
        release.wait(10)
        return real(password, h)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", stuck)
    monkeypatch.setattr(BasicAuth, "HASH_WAIT_S", 1.0)
    outcomes: list[object] = []

    def attempt(password: str) -> None:
        try:
            outcomes.append(auth.check(users, basic("prometheus", password), "10.0.0.9"))
        except webconfig.AuthBusy as err:
            outcomes.append(err)

    flood = [threading.Thread(target=attempt, args=(f"guess-{i}",)) for i in range(2)]
    flood[0].start()
    assert running.wait(5)
    flood[1].start()
    deadline = time.monotonic() + 5
    while auth._queued.get("10.0.0.9") != 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the second guess is in the queue
    started = time.monotonic()
    with pytest.raises(webconfig.AuthBusy, match="2 password checks of this client already wait"):
        auth.check(users, basic("prometheus", "guess-3"), "10.0.0.9")
    assert auth.check(users, basic("prometheus", PASSWORD), "10.0.0.1"), "known: answered from the cache"
    assert time.monotonic() - started < 0.5, "neither waited for the stuck hash"
    with pytest.raises(webconfig.AuthBusy, match=r"bcrypt was not free within 1s"):
        auth.check(users, basic("prometheus", "new"), "10.0.0.1")
    assert time.monotonic() - started < 3.0, "a new password waits HASH_WAIT_S, not for the hash to end"
    release.set()
    for t in flood:
        t.join(10)
    assert sorted(type(o).__name__ for o in outcomes) == ["AuthBusy", "bool"], outcomes
    assert auth.check(users, basic("prometheus", "guess-0"), "10.0.0.9") is False, "refusals are cached"
    assert auth.check(users, basic("prometheus", "guess-1"), "10.0.0.9") is False, "the queue is free again"


def test_the_same_credentials_asked_at_once_share_one_check(monkeypatch: pytest.MonkeyPatch, hashed: str) -> None:
    """Scrapes at once from one address (more than its two places in the queue) with a password not checked yet."""
    users = {"prometheus": hashed.encode()}
    auth, counter = BasicAuth(), CountingBcrypt(monkeypatch)
    counted = webconfig.bcrypt.checkpw
    release = threading.Event()
    monkeypatch.setattr(webconfig.bcrypt, "checkpw", lambda p, h: release.wait(10) and counted(p, h))
    outcomes: list[object] = []

    def scrape() -> None:
        try:
            outcomes.append(auth.check(users, basic("prometheus", PASSWORD), "10.0.0.1"))
        except webconfig.AuthBusy as err:
            outcomes.append(err)

    scrapes = [threading.Thread(target=scrape) for _ in range(6)]
    for t in scrapes:
        t.start()
    time.sleep(0.3)  # all of them asked
    release.set()
    for t in scrapes:
        t.join(10)
    assert outcomes == [True] * 6 and counter.calls == 1


def _timed_get(url: str, authorization: str) -> tuple[int | None, float]:
    started = time.monotonic()
    try:
        code = get(url, authorization)[0]
    except REFUSED:  # a timeout (5 s) counts as no answer
        code = None
    return code, time.monotonic() - started


def test_a_flood_of_wrong_passwords_leaves_scrapes_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serve
) -> None:
    """Before: 64 clients of wrong passwords made a valid scrape take 7.8 s, 9.1 s, then time out at 10 s."""
    # Small caches turn over within the first second of the flood, as 100 entries do within 10 s.
    monkeypatch.setattr(BasicAuth, "CACHE_SIZE", 4)
    monkeypatch.setattr(BasicAuth, "FAILURE_CACHE_SIZE", 4, raising=False)
    production = 10  # htpasswd -nBC 10: about 0.1 s a check, so the flood queues for the hash
    web = write(
        tmp_path / "web.yml",
        f"basic_auth_users:\n  prometheus: '{bcrypt_hash(PASSWORD, production)}'\n"
        f"  grafana: '{bcrypt_hash('other', production)}'\n",
    )
    srv = serve(web)
    url = f"http://127.0.0.1:{srv.port}/metrics"
    assert get(url, basic("prometheus", PASSWORD))[0] == 200  # verified once: known from here on
    stop = threading.Event()
    refused: list[int | None] = []

    def flood(n: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            refused.append(_timed_get(url, basic("prometheus", f"guess-{n}-{i}"))[0])

    threads = [threading.Thread(target=flood, args=(n,), daemon=True) for n in range(32)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        known = []
        for _ in range(3):
            known.append(_timed_get(url, basic("prometheus", PASSWORD)))
            time.sleep(0.3)
        new = _from_another_address(srv.port, basic("grafana", "other"))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert [code for code, _ in known] == [200] * 3, known
    assert max(s for _, s in known) < 3.0, known
    # Not known yet (a new scraper, or any after a restart): the flooding client holds two places
    # in the queue for bcrypt, so another client's password is checked within a few hashes.
    assert new[0] == 200 and new[1] < 3.0, new
    # The flood itself is answered, not queued: 401 for each guess checked, 503 for the rest.
    assert set(refused) == {401, 503}, collections.Counter(refused)


def _from_another_address(port: int, authorization: str) -> tuple[int | None, float]:
    """GET /metrics from 127.0.0.2 (Linux answers all of 127/8 on loopback), timed."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=("127.0.0.2", 0))
    try:
        conn.request("GET", "/metrics", headers={"Authorization": authorization})
        code: int | None = conn.getresponse().status
    except REFUSED:
        code = None
    finally:
        conn.close()
    return code, time.monotonic() - started
