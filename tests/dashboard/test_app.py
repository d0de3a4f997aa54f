"""The dashboard's pages, actions and defences, through its ASGI interface (no server):
everything from Redis is escaped, bad data stays contained, dead letters page in bounded
steps, and every action goes through the same client calls as the CLI, behind the token,
the CSRF token, the Origin check and read-only."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest
import trio

import trunner
from trunner.keys import Keys

from ..support.seeding import message, seed_dead, seed_delayed, seed_queued
from ..support.servers import RedisServer
from .helpers import ORIGIN, csrf_of, open_app, open_dashboard, post

XSS = "<script>alert('x')</script><img src=x onerror=alert(1)>"


async def test_the_group_page_shows_the_group_and_escapes_what_redis_holds(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    seed_dead(raw, keys, 3, task=XSS, error=XSS)
    seed_queued(raw, keys, 4)
    async with open_app(url, [group]) as http:
        page = await http.get(f"/group/{group}")
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "onerror=alert" not in page.text.replace("onerror=alert(1)&gt;", "")
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
        assert page.text.count('class="error-text"') == 3
        assert 'id="count-queue">4<' in page.text
        assert 'id="count-dead">3<' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        overview = await http.get("/")
        assert f'href="/group/{group}"' in overview.text
        snapshot = (await http.get(f"/group/{group}/snapshot")).json()
        assert snapshot["counts"]["queue"] == 4
        assert snapshot["series"]["pickup"][-1] >= 0
        assert (await http.get("/group/nope")).status_code == 404


async def test_bad_data_shows_as_unreadable_and_the_rest_still_shows(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    raw.set(keys.instances, "not a sorted set")  # inspect() fails on it
    raw.xadd(keys.dead, {"garbage": b"\xff\xfe"})  # a dead letter of no known field
    seed_delayed(raw, keys, "bad-1", time.time() + 60, b"\xff not a message")
    async with open_app(url, [group]) as http:
        page = await http.get(f"/group/{group}")
        assert page.status_code == 200
        assert "overview unreadable: " in page.text
        assert "(undecodable)" in page.text, "the dead letter shows, as undecodable"
        snapshot = (await http.get(f"/group/{group}/snapshot")).json()
        assert "overview" in snapshot["errors"]
        assert snapshot["delayed_tasks"][0]["problem"].startswith("undecodable")
        assert (await http.get("/")).status_code == 200


async def test_dead_letters_page_by_an_id_cursor_a_bounded_page_at_a_time(
    redis_server: RedisServer, group: str
) -> None:
    from ..conftest import raw_client  # noqa: PLC0415 - the one real-Redis client here

    raw = raw_client(redis_server.url)
    keys = Keys("trunner", group)
    ids = seed_dead(raw, keys, 20_000)
    async with open_app(redis_server.url, [group]) as http:
        before = raw.info("commandstats").get("cmdstat_xrevrange", {}).get("calls", 0)
        first = await http.get(f"/group/{group}")
        after = raw.info("commandstats").get("cmdstat_xrevrange", {}).get("calls", 0)
        assert after - before == 1, "one XREVRANGE ... COUNT per page"
        shown = re.findall(r'<tr data-id="([^"]+)"', first.text)
        assert shown == ids[::-1][:50]
        older = re.search(r'id="older" href="([^"]+)"', first.text)
        assert older is not None
        second = await http.get(older.group(1).replace("&amp;", "&"))
        assert re.findall(r'<tr data-id="([^"]+)"', second.text) == ids[::-1][50:100]
    raw.close()


async def test_actions_go_through_the_client_api(
    url: str, group: str, keys: Keys, raw: Any
) -> None:
    tasks = trunner.TaskRegistry()

    @tasks.cron("0 3 * * *", payload={"deep": True})
    async def nightly(payload: Any) -> None:
        pass

    jobs = seed_dead(raw, keys, 3, task="job")
    seed_dead(raw, keys, 2, task="other")
    async with trunner.open_client(url, group) as client:
        delayed = await client.dispatch_delayed("later", None, 600)
    async with open_app(url, [group], tasks=tasks) as http:
        csrf = csrf_of((await http.get(f"/group/{group}")).text)
        act = f"/group/{group}/action/"
        done = await post(http, act + "replay-dead", {"csrf": csrf, "one": jobs[0]})
        assert done.status_code == 303
        assert (await http.get(done.headers["location"])).text.count("replayed 1 dead letter") == 1
        await post(http, act + "delete-dead", {"csrf": csrf, "ids": [jobs[1], jobs[2]]})
        await post(http, act + "replay-dead-task", {"csrf": csrf, "task": "other"})
        assert raw.xlen(keys.dead) == 0
        assert raw.xlen(keys.stream) == 3
        await post(http, act + "cancel", {"csrf": csrf, "id": delayed})
        assert raw.zcard(keys.delayed) == 0
        fired = await post(http, act + "fire-cron", {"csrf": csrf, "name": "nightly"})
        assert "fired cron nightly" in (await http.get(fired.headers["location"])).text
        assert raw.xlen(keys.stream) == 4
        seed_dead(raw, keys, 2, task="job")
        await post(http, act + "delete-dead-task", {"csrf": csrf, "task": "job"})
        assert raw.xlen(keys.dead) == 0
        failed = await post(http, act + "fire-cron", {"csrf": csrf, "name": "ghost"})
        assert "Fire now failed: LookupError" in (await http.get(failed.headers["location"])).text
        assert (await post(http, act + "format-disk", {"csrf": csrf})).status_code == 404


async def test_posts_need_the_csrf_token_and_this_site_s_origin(
    memory_url: str, group: str
) -> None:
    async with trunner.open_client(memory_url, group) as client:
        delayed = await client.dispatch_delayed("later", None, 600)
        async with open_app(memory_url, [group]) as http:
            csrf = csrf_of((await http.get(f"/group/{group}")).text)
            cancel = f"/group/{group}/action/cancel"
            no_token = await post(http, cancel, {"id": delayed})
            assert no_token.status_code == 403
            assert no_token.text.startswith("no CSRF token")
            wrong = await post(http, cancel, {"id": delayed, "csrf": "x" * 40})
            assert wrong.status_code == 403
            foreign = await post(
                http, cancel, {"id": delayed, "csrf": csrf}, origin="http://evil.example"
            )
            assert foreign.status_code == 403
            assert "cross-origin" in foreign.text
            anonymous = await post(http, cancel, {"id": delayed, "csrf": csrf}, origin=None)
            assert anonymous.status_code == 403
            http.cookies.clear()
            stolen = await post(http, cancel, {"id": delayed, "csrf": csrf})
            assert stolen.status_code == 403, "the token belongs to another session"
            assert await client.admin.delayed_count() == 1
            csrf = csrf_of((await http.get(f"/group/{group}")).text)
            referer = await http.post(
                cancel, data={"id": delayed, "csrf": csrf}, headers={"referer": ORIGIN + "/x"}
            )
            assert referer.status_code == 303
            assert await client.admin.delayed_count() == 0


async def test_read_only_shows_no_action_and_refuses_posts(
    memory_url: str, group: str, keys: Keys
) -> None:
    raw = trunner_raw(memory_url)
    seed_dead(raw, keys, 1)
    async with open_app(memory_url, [group], read_only=True) as http:
        page = await http.get(f"/group/{group}")
        assert "read-only" in page.text
        assert "<button" not in page.text
        assert 'name="ids"' not in page.text
        refused = await post(
            http, f"/group/{group}/action/replay-dead", {"csrf": csrf_of(page.text)}
        )
        assert refused.status_code == 403
    assert raw.xlen(keys.dead) == 1


def trunner_raw(memory_url: str) -> Any:
    from ..conftest import raw_client  # noqa: PLC0415 - the tests' own raw client

    return raw_client(memory_url)


async def test_a_token_is_needed_by_bearer_header_or_by_the_login_form(
    memory_url: str, group: str
) -> None:
    async with open_app(memory_url, [group], token="s3cret-token-of-16+") as http:
        assert (await http.get(f"/group/{group}/snapshot")).status_code == 401
        assert (await http.get(f"/group/{group}/events")).status_code == 401
        page = await http.get("/", headers={"accept": "text/html"})
        assert (page.status_code, page.headers["location"]) == (303, "/login")
        bearer = {"authorization": "Bearer s3cret-token-of-16+"}
        assert (await http.get(f"/group/{group}/snapshot", headers=bearer)).status_code == 200
        form = await http.get("/login")
        csrf = csrf_of(form.text)
        wrong = await post(http, "/login", {"csrf": csrf, "token": "guess"})
        assert wrong.status_code == 403
        assert "wrong token" in wrong.text
        assert "s3cret" not in wrong.text
        logged = await post(http, "/login", {"csrf": csrf, "token": "s3cret-token-of-16+"})
        assert logged.status_code == 303
        cookie = logged.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert (await http.get(f"/group/{group}/snapshot")).status_code == 200
        http.cookies.clear()
        assert (await http.get(f"/group/{group}/snapshot")).status_code == 401


async def test_the_redis_password_is_never_shown(redis_server: RedisServer, group: str) -> None:
    from ..conftest import raw_client  # noqa: PLC0415 - the one real-Redis client here

    raw = raw_client(redis_server.url)
    user = f"dash-{group}"
    raw.acl_setuser(user, enabled=True, passwords=["+hunter2-secret"], keys=["*"],
                    channels=["*"], commands=["+@all"])  # fmt: skip
    try:
        secret = f"redis://{user}:hunter2-secret@127.0.0.1:{redis_server.port}/0"
        async with open_app(secret, [group]) as http:
            for path in ("/", f"/group/{group}", f"/group/{group}/snapshot"):
                text = (await http.get(path)).text
                assert "hunter2" not in text
            assert f"redis://{user}:***@127.0.0.1" in (await http.get("/")).text
    finally:
        raw.acl_deluser(user)
        raw.close()


def test_the_command_refuses_to_serve_beyond_loopback_without_a_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from trunner.cli import main  # noqa: PLC0415 - the command under test

    assert main(["dashboard", "redis://127.0.0.1:1/0", "--group", "g", "--host", "0.0.0.0"]) == 1
    assert "without a token" in capsys.readouterr().err
    # Without --group it looks for the groups: on a Redis it cannot reach, it says so.
    assert main(["dashboard", "redis://127.0.0.1:1/0", "--host", "127.0.0.1", "--port", "0"]) == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in capsys.readouterr().err


def test_a_dashboard_that_cannot_start_does_not_say_where_it_serves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hypercorn binds and reports its address even when the app's startup failed (it
    lets the failure through afterwards): the command printed 'trunner dashboard on
    http://...' above the one line saying that Redis cannot be reached."""
    from trunner.cli import main  # noqa: PLC0415 - the command under test

    for named in ([], ["--group", "g"]):
        argv = ["dashboard", "redis://127.0.0.1:1/0", "--port", "0", *named]
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert "cannot reach Redis at redis://127.0.0.1:1/0" in err
        assert "trunner dashboard on" not in out, named


async def test_a_dashboard_that_starts_says_where_it_serves(
    memory_url: str, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from trunner.dashboard._serve import run_dashboard  # noqa: PLC0415 - the dashboard extra

    printed = ""
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_dashboard(
                    memory_url, [group], host="127.0.0.1", port=0, read_only=True,
                    token=None, tasks=None, prefix="trunner",
                )
            )  # fmt: skip
            while "\n" not in printed:
                await trio.sleep(0.01)
                printed += capsys.readouterr().out
            nursery.cancel_scope.cancel()
    assert re.fullmatch(r"trunner dashboard on http://127\.0\.0\.1:\d+/\n", printed)


async def test_pages_of_a_mounted_dashboard_link_under_its_path(
    memory_url: str, group: str
) -> None:
    import httpx  # noqa: PLC0415 - idem
    from starlette.applications import Starlette  # noqa: PLC0415 - the dashboard extra
    from starlette.routing import Mount  # noqa: PLC0415 - idem

    from trunner.dashboard import create_app  # noqa: PLC0415 - idem

    dashboard = create_app(memory_url, [group])
    outer = Starlette(routes=[Mount("/ops", dashboard)])
    async with dashboard.router.lifespan_context(dashboard):
        transport = httpx.ASGITransport(app=outer)
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as http:
            page = await http.get(f"/ops/group/{group}")
            assert page.status_code == 200
            assert 'src="/ops/static/dashboard.js"' in page.text
            assert f'data-events="/ops/group/{group}/events"' in page.text
            assert (await http.get("/ops/static/dashboard.js")).status_code == 200
    await trio.lowlevel.checkpoint()


def test_a_short_token_is_refused_at_start(memory_url: str, group: str) -> None:
    from trunner.dashboard import create_app  # noqa: PLC0415 - the dashboard extra

    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(memory_url, [group], token="s3cret")
    create_app(memory_url, [group], token="x" * 16)


def test_the_seeded_message_is_a_message() -> None:
    assert b'"task":"job"' in message("job")


async def test_an_action_on_the_group_gets_its_button_by_itself(
    memory_url: str, group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How pause/resume are added: one ACTIONS entry each, with on_group."""
    from trunner.dashboard import _actions  # noqa: PLC0415 - the action table under test

    calls: list[str] = []

    async def ping(client: trunner.Client, form: _actions.Form) -> str:
        calls.append(client.consumer_group)
        return "pinged"

    action = _actions.Action("ping", "Ping", "Ping group {}?", ping, on_group=True)
    monkeypatch.setitem(_actions.ACTIONS, "ping", action)
    async with open_app(memory_url, [group]) as http:
        page = await http.get(f"/group/{group}")
        assert f'data-confirm="Ping group {group}?"' in page.text
        done = await post(http, f"/group/{group}/action/ping", {"csrf": csrf_of(page.text)})
        assert "pinged" in (await http.get(done.headers["location"])).text
    assert calls == [group]


async def test_pause_and_resume_the_group_from_its_header(memory_url: str, group: str) -> None:
    async with (
        trunner.open_client(memory_url, group) as client,
        open_app(memory_url, [group]) as http,
    ):
        page = await http.get(f"/group/{group}")
        assert 'id="group-pause"' in page.text
        assert 'id="group-resume"' in page.text
        assert 'id="paused" class="paused" hidden' in page.text
        token = csrf_of(page.text)
        done = await post(http, f"/group/{group}/action/pause", {"csrf": token})
        assert "paused" in (await http.get(done.headers["location"])).text
        assert (await client.admin.inspect()).paused
        again = await post(http, f"/group/{group}/action/pause", {"csrf": token})
        assert "was paused already" in (await http.get(again.headers["location"])).text
        snapshot = (await http.get(f"/group/{group}/snapshot")).json()
        assert snapshot["paused_since"] is not None
        assert 'id="paused" class="paused">' in (await http.get(f"/group/{group}")).text
        done = await post(http, f"/group/{group}/action/resume", {"csrf": token})
        assert "resumed" in (await http.get(done.headers["location"])).text
        assert not (await client.admin.inspect()).paused


@pytest.mark.parametrize("bound", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
async def test_a_loopback_dashboard_without_a_token_answers_loopback_hosts_only(
    memory_url: str, group: str, bound: str
) -> None:
    """Against DNS rebinding, on every loopback bind: IPv6 ones too (``Host: [::1]:8080``,
    which Starlette's TrustedHostMiddleware never matches)."""
    from trunner.dashboard._serve import allowed_hosts_for  # noqa: PLC0415 - under test

    assert allowed_hosts_for(bound, "a token") is None, "the token guards it"
    hosts = allowed_hosts_for(bound, None)
    assert hosts is not None
    address = bound.strip("[]")
    own = f"[{address}]:8080" if ":" in address else f"{address}:8080"
    async with open_app(memory_url, [group], allowed_hosts=hosts) as http:
        for host in ("127.0.0.1:8080", "localhost", "[::1]:8080", "[::1]", own):
            page = await http.get(f"/group/{group}", headers={"host": host})
            assert page.status_code == 200, host
        for host in ("evil.example:8080", "evil.example", "127.0.0.1.evil.example", "[::2]:80"):
            refused = await http.get(f"/group/{group}", headers={"host": host})
            assert refused.status_code == 400, host
        refused = await http.post(f"/group/{group}/action/pause", headers={"host": "evil.example"})
        assert refused.status_code == 400


async def test_a_token_cookie_or_csrf_token_that_is_not_ascii_is_refused_not_a_crash(
    memory_url: str, group: str
) -> None:
    """What a request carries may be any text: compared as bytes (``hmac.compare_digest``
    raises TypeError on a str that is not ASCII), it is refused like any wrong value."""
    async with open_app(memory_url, [group], token="s3cret-token-of-16+") as http:
        bad_cookie = {b"cookie": "trunner_dashboard=abc.1.\u00e9t\u00e9".encode("latin-1")}
        assert (await http.get(f"/group/{group}/snapshot", headers=bad_cookie)).status_code == 401
        bearer = {b"authorization": "Bearer s3cr\u00e9t-token-of-16+".encode("latin-1")}
        assert (await http.get(f"/group/{group}/snapshot", headers=bearer)).status_code == 401
        login = await http.get("/login")
        csrf = csrf_of(login.text)
        wrong = await post(http, "/login", {"csrf": csrf, "token": "s3cr\u00e9t"})
        assert wrong.status_code == 403
        assert "wrong token" in wrong.text
        foreign = await post(http, "/login", {"csrf": "\u00e9" * 40, "token": "s3cret"})
        assert foreign.status_code == 403
        assert "wrong CSRF token" in foreign.text
        done = await post(http, "/login", {"csrf": csrf, "token": "s3cret-token-of-16+"})
        assert done.status_code == 303
        csrf = csrf_of((await http.get(f"/group/{group}")).text)
        act = f"/group/{group}/action/pause"
        header = {b"origin": ORIGIN.encode(), b"x-csrf-token": "\u00e9t\u00e9".encode("latin-1")}
        refused = await http.post(act, headers=header)
        assert refused.status_code == 403
        assert "wrong CSRF token" in refused.text
        assert (await post(http, act, {"csrf": csrf})).status_code == 303


async def test_an_action_on_a_group_whose_name_has_url_characters_returns_to_its_page(
    memory_url: str,
) -> None:
    """Group names may hold '#', '?' and '%': the links quote them, and so must the
    redirect after an action (else it leads to another path, or to none)."""
    groups = ["ops#1", "what?", "100%"]
    async with open_app(memory_url, groups) as http:
        for name in groups:
            quoted = {"ops#1": "ops%231", "what?": "what%3F", "100%": "100%25"}[name]
            page = await http.get(f"/group/{quoted}")
            assert page.status_code == 200, name
            done = await post(http, f"/group/{quoted}/action/pause", {"csrf": csrf_of(page.text)})
            assert done.status_code == 303
            assert done.headers["location"] == f"/group/{quoted}"
            back = await http.get(done.headers["location"])
            assert back.status_code == 200
            assert "paused" in back.text


async def test_the_group_page_shows_each_lanes_length(url: str, group: str, raw: Any) -> None:
    """A queue whose runners declared lanes: the page and its snapshot give each lane's
    length (what the lanes registry names); a queue of one lane shows none."""
    keys = Keys("trunner", group)
    async with open_app(url, [group]) as http:
        page = await http.get(f"/group/{group}")
        assert '<p id="lanes" class="note" hidden>' in page.text
    raw.sadd(keys.lanes, "urgent")
    async with trunner.open_client(url, group) as client:
        await client.dispatch_many("record", [1, 2], priority="urgent")
        await client.dispatch("record", 3)
    async with open_app(url, [group]) as http:
        snapshot = (await http.get(f"/group/{group}/snapshot")).json()
        assert snapshot["lanes"] == {"default": 1, "urgent": 2}
        assert snapshot["counts"]["queue"] == 3
        page = await http.get(f"/group/{group}")
        assert '<p id="lanes" class="note">by lane: default 1, urgent 2</p>' in page.text


def _register(raw: Any, prefix: str, queue: str, *groups: str) -> None:
    """Register groups in their queue's registry, as the script creating them does."""
    raw.sadd(Keys(prefix, queue).groups, *groups)


async def test_without_groups_named_every_group_found_is_shown(url: str, raw: Any) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"  # the session's Redis holds other tests' groups
    _register(raw, prefix, "emails", "emails")
    _register(raw, prefix, "events", "audit", "mailer")  # two groups on one queue
    _register(raw, f"{prefix}x", "elsewhere", "elsewhere")  # another prefix: not shown
    async with open_dashboard(url, None, prefix=prefix) as (dashboard, http):
        overview = (await http.get("/")).text
        links = re.findall(r'<td><a href="([^"]+)">([^<]+)</a>', overview)
        assert links == [
            ("/group/emails", "emails"),
            ("/queue/events/group/audit", "audit (queue events)"),
            ("/queue/events/group/mailer", "mailer (queue events)"),
        ]
        assert "elsewhere" not in overview
        page = await http.get("/queue/events/group/audit")
        assert page.status_code == 200
        assert 'reading queue <span class="name">events</span>' in page.text
        assert 'data-events="/queue/events/group/audit/events"' in page.text
        snapshot = (await http.get("/queue/events/group/audit/snapshot")).json()
        assert (snapshot["group"], snapshot["queue"]) == ("audit", "events")
        assert (await http.get("/group/audit")).status_code == 404, "not on a queue 'audit'"
        done = await post(
            http, "/queue/events/group/audit/action/pause", {"csrf": csrf_of(page.text)}
        )
        assert done.headers["location"] == "/queue/events/group/audit"
        assert raw.exists(Keys(prefix, "audit", "events").paused)
        assert not raw.exists(Keys(prefix, "mailer", "events").paused)

        _register(raw, prefix, "late", "late")  # a group whose runner started afterwards
        assert [(f.queue, f.group) for f in await dashboard.discover()] == [("late", "late")]
        assert 'href="/group/late"' in (await http.get("/")).text
        assert await dashboard.discover() == [], "a group shown is not started twice"


async def test_groups_named_narrow_what_is_shown(url: str, raw: Any) -> None:
    prefix = f"d{uuid.uuid4().hex[:8]}"
    _register(raw, prefix, "emails", "emails")
    _register(raw, prefix, "events", "audit", "mailer")
    async with open_app(url, ["audit", "ghost"], prefix=prefix) as http:
        overview = (await http.get("/")).text
        links = re.findall(r'<td><a href="([^"]+)">', overview)
        # audit where it was found; ghost, found nowhere, on the queue of its own name
        assert links == ["/queue/events/group/audit", "/group/ghost"]  # by queue
        assert "Named: audit, ghost." in overview
        assert (await http.get("/group/ghost")).status_code == 200
        assert (await http.get("/group/emails")).status_code == 404


async def test_an_empty_redis_shows_an_empty_overview_that_says_why(memory_url: str) -> None:
    async with open_app(memory_url, None) as http:
        overview = await http.get("/")
        assert overview.status_code == 200
        assert 'id="no-groups"' in overview.text
        assert "once one of its runners has started" in overview.text
