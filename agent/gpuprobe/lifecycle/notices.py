"""The providers' notices of a node's end, read with each provider's documented protocol.

- AWS (IMDSv2): a session token from `PUT /latest/api/token`
  (`X-aws-ec2-metadata-token-ttl-seconds`), then GETs carrying `X-aws-ec2-metadata-token`:
  `/latest/meta-data/spot/instance-action` (404 until `{"action": "terminate" | "stop" |
  "hibernate", "time": "<RFC 3339>"}`, two minutes ahead), `/latest/meta-data/events/
  recommendations/rebalance` (404 until `{"noticeTime": "<RFC 3339>"}`) and `/latest/
  meta-data/events/maintenance/scheduled` (a JSON list of `{"Code", "Description", "EventId",
  "NotBefore", "NotAfter", "NotBeforeDeadline", "State"}`, times as `21 Jan 2019 09:00:43 GMT`;
  `[]` when none). A 401 is a missing or expired token: the token is fetched once more.
- GCE: `Metadata-Flavor: Google` on every request, and on every answer (one without it is not
  the metadata server); `/computeMetadata/v1/instance/preempted` (`TRUE` / `FALSE`) and
  `/computeMetadata/v1/instance/maintenance-event` (`NONE`, `MIGRATE_ON_HOST_MAINTENANCE`,
  `TERMINATE_ON_HOST_MAINTENANCE`). A preempted VM stops about 30 s later.
- Azure Scheduled Events: `GET /metadata/scheduledevents?api-version=2020-07-01` with
  `Metadata: true`: `{"DocumentIncarnation": n, "Events": [{"EventId", "EventType": "Preempt" |
  "Reboot" | "Redeploy" | "Freeze" | "Terminate", "ResourceType": "VirtualMachine",
  "Resources": [names], "EventStatus": "Scheduled" | "Started", "NotBefore": RFC 1123 or "",
  "Description", "EventSource", "DurationInSeconds"}]}`. An event names the VMs it touches;
  this VM's name comes from `/metadata/instance/compute/name`. The agent never acknowledges
  an event (the POST that would let it start early).

A service that does not answer, answers with an error status, a redirect or a body that is
not what the provider documents makes the reading's `problem`: the notices are then unknown,
never "none".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from gpuprobe.host import Host
from gpuprobe.host.metadata import TOKEN_PATH, MetadataAnswer
from gpuprobe.lifecycle.provider import AWS, AZURE, GCP

PREEMPTION, MAINTENANCE, REBALANCE = "preemption", "maintenance", "rebalance"
# The order notices are named in, the most urgent first (the taint names the first).
KINDS = (PREEMPTION, MAINTENANCE, REBALANCE)
DEFAULT_ENDPOINTS = {
    AWS: "http://169.254.169.254",
    AZURE: "http://169.254.169.254",
    GCP: "http://metadata.google.internal",
}
# IMDSv2 tokens live up to 6 hours; one is asked for that long and used until a minute before.
TOKEN_TTL_SECONDS = 21600
AWS_SPOT = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE = "/latest/meta-data/events/recommendations/rebalance"
AWS_SCHEDULED = "/latest/meta-data/events/maintenance/scheduled"
GCE_PREEMPTED = "/computeMetadata/v1/instance/preempted"
GCE_MAINTENANCE = "/computeMetadata/v1/instance/maintenance-event"
AZURE_EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"
AZURE_NAME = "/metadata/instance/compute/name?api-version=2021-02-01&format=text"
# GCE stops a preempted VM about 30 s after `preempted` turns TRUE.
GCE_PREEMPTION_NOTICE = timedelta(seconds=30)
# How far from now an announced time may lie: notices come minutes (spot, preemption) to weeks
# (scheduled maintenance) ahead, an event in progress began hours or days ago.
SANE_WINDOW = timedelta(days=366)
AZURE_MAINTENANCE_TYPES = ("Reboot", "Redeploy", "Freeze", "Terminate")
MAX_QUOTED = 80  # of an unexpected body, in a problem's words


@dataclass(frozen=True)
class Notice:
    """One announcement: its kind, what said it, when the node goes (None: not said)."""

    kind: str  # preemption | maintenance | rebalance
    source: str  # the endpoint or event that said it
    detail: str  # the provider's own words: action, event code or type, status
    time: datetime | None = None
    # `time` is the provider's documented lead (GCE's 30 s), not a time it gave.
    estimated: bool = False


@dataclass(frozen=True)
class NoticeReading:
    """What the provider's metadata service said: its notices and the plain answers read
    (`answers`: endpoint → what it said), or why it could not be read (`problem`)."""

    provider: str
    endpoint: str
    notices: tuple[Notice, ...] = ()
    answers: Mapping[str, str] = field(default_factory=dict)
    problem: str | None = None


class BadAnswer(Exception):
    """An answer the provider does not document: the reading's problem."""


Ask = Callable[[str, str, Mapping[str, str]], MetadataAnswer]


def read_notices(
    host: Host,
    provider: str,
    endpoint: str,
    timeout_s: float,
    cache: MutableMapping[str, Any],
    now: datetime,
) -> NoticeReading:
    """The provider's notices now, asked of the host's metadata service; `cache` keeps the
    IMDSv2 token between readings."""

    def ask(method: str, path: str, headers: Mapping[str, str]) -> MetadataAnswer:
        return host.metadata.ask(endpoint, method, path, headers, timeout_s)

    reader = {AWS: _aws, GCP: _gcp, AZURE: _azure}[provider]
    answers: dict[str, str] = {}
    try:
        notices = reader(ask, answers, cache, now)
    except BadAnswer as exc:
        return NoticeReading(provider, endpoint, answers=answers, problem=str(exc))
    ordered = tuple(sorted(notices, key=lambda n: KINDS.index(n.kind)))
    return NoticeReading(provider, endpoint, ordered, answers)


def _judge(answer: MetadataAnswer, what: str, ok: tuple[int, ...] = (200,)) -> None:
    """Raise BadAnswer unless the answer came with one of the `ok` statuses."""
    if answer.error is not None:
        raise BadAnswer(f"{what}: {answer.error}")
    assert answer.status is not None
    if 300 <= answer.status < 400:
        where = answer.header("Location") or "nowhere"
        raise BadAnswer(f"{what}: redirected ({answer.status}) to {where}; not followed")
    if answer.status not in ok:
        raise BadAnswer(f"{what}: HTTP {answer.status}{_quote(answer.body)}")


def _quote(body: str) -> str:
    text = " ".join(body.split())
    if not text:
        return ""
    return f" ({text[:MAX_QUOTED]}{'...' if len(text) > MAX_QUOTED else ''})"


def _json(answer: MetadataAnswer, what: str) -> Any:
    try:
        return json.loads(answer.body)
    except (json.JSONDecodeError, RecursionError, ValueError):
        raise BadAnswer(f"{what}: not JSON{_quote(answer.body)}") from None


def _rfc3339(text: Any, what: str, now: datetime) -> datetime:
    if not isinstance(text, str):
        raise BadAnswer(f"{what}: time {text!r} is not a string")
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadAnswer(f"{what}: time {text[:MAX_QUOTED]!r} is not an RFC 3339 time") from None
    return _sane(parsed, text, what, now)


def _sane(parsed: datetime, text: str, what: str, now: datetime) -> datetime:
    """The time in UTC, when it lies within SANE_WINDOW of now; else BadAnswer. A notice's
    time is minutes to weeks from now: year 9999 with an offset (past datetime's range in
    UTC), year 1 or the epoch is a broken service's answer, never a node going now."""
    aware = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    try:
        utc = aware.astimezone(UTC)
        sane = now - SANE_WINDOW <= utc <= now + SANE_WINDOW
    except (OverflowError, ValueError):
        sane = False
    if not sane:
        raise BadAnswer(
            f"{what}: time {text[:MAX_QUOTED]!r} is not within {SANE_WINDOW.days} days of now, "
            "as a notice's time is: a bad answer"
        )
    return utc


def _http_date(text: Any, what: str, now: datetime) -> datetime | None:
    """An RFC 1123 time (`Mon, 19 Sep 2016 18:29:47 GMT`) or AWS's `21 Jan 2019 09:00:43 GMT`;
    None for an empty one (Azure leaves NotBefore empty once an event has started)."""
    if text == "":
        return None
    if not isinstance(text, str):
        raise BadAnswer(f"{what}: time {text!r} is not a string")
    try:
        parsed = parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError):
        raise BadAnswer(f"{what}: time {text[:MAX_QUOTED]!r} is not an HTTP date") from None
    return _sane(parsed, text, what, now)


# --- AWS -----------------------------------------------------------------------------------


def _aws(
    ask: Ask, answers: dict[str, str], cache: MutableMapping[str, Any], now: datetime
) -> list[Notice]:
    notices: list[Notice] = []
    spot = _aws_get(ask, AWS_SPOT, cache, now)
    if spot.status == 200:
        body = _json(spot, AWS_SPOT)
        if not isinstance(body, dict) or not isinstance(body.get("action"), str):
            raise BadAnswer(f'{AWS_SPOT}: expected {{"action", "time"}}{_quote(spot.body)}')
        when = _rfc3339(body.get("time"), AWS_SPOT, now)
        answers[AWS_SPOT] = f"{body['action']} at {when.isoformat()}"
        notices.append(Notice(PREEMPTION, AWS_SPOT, f"spot {body['action']}", when))
    else:
        answers[AWS_SPOT] = "none (404)"
    rebalance = _aws_get(ask, AWS_REBALANCE, cache, now)
    if rebalance.status == 200:
        body = _json(rebalance, AWS_REBALANCE)
        if not isinstance(body, dict) or "noticeTime" not in body:
            raise BadAnswer(f'{AWS_REBALANCE}: expected {{"noticeTime"}}{_quote(rebalance.body)}')
        when = _rfc3339(body["noticeTime"], AWS_REBALANCE, now)
        answers[AWS_REBALANCE] = f"recommended at {when.isoformat()}"
        # The notice time is when it was given, not when the node goes.
        notices.append(Notice(REBALANCE, AWS_REBALANCE, "rebalance recommendation"))
    else:
        answers[AWS_REBALANCE] = "none (404)"
    scheduled = _aws_get(ask, AWS_SCHEDULED, cache, now)
    events: Any = []
    if scheduled.status == 200:
        events = _json(scheduled, AWS_SCHEDULED)
    if isinstance(events, dict):  # one event written as an object, not a list of one
        events = [events]
    if not isinstance(events, list):
        raise BadAnswer(f"{AWS_SCHEDULED}: expected a list of events{_quote(scheduled.body)}")
    active = 0
    for event in events:
        if not isinstance(event, dict) or not isinstance(event.get("Code"), str):
            raise BadAnswer(f'{AWS_SCHEDULED}: an event without its "Code"')
        if event.get("State", "active") != "active":
            continue  # completed or canceled: kept by AWS for a week, no longer due
        active += 1
        begins = _http_date(event.get("NotBefore", ""), AWS_SCHEDULED, now)
        detail = f"{event['Code']} ({event.get('EventId', 'no id')})"
        if event.get("Description"):
            detail += f": {event['Description']}"
        notices.append(Notice(MAINTENANCE, AWS_SCHEDULED, detail, begins))
    answers[AWS_SCHEDULED] = f"{active} active of {len(events)}"
    return notices


def _aws_get(ask: Ask, path: str, cache: MutableMapping[str, Any], now: datetime) -> MetadataAnswer:
    """A GET with the session token (a fresh one after a 401); 200 or 404, else BadAnswer."""
    for attempt in range(2):
        token = _aws_token(ask, cache, now, fresh=attempt > 0)
        answer = ask("GET", path, {"X-aws-ec2-metadata-token": token})
        if answer.status == 401 and attempt == 0:
            cache.pop("imds_token", None)  # expired, or the service restarted: once more
            continue
        _judge(answer, path, ok=(200, 404))
        return answer
    raise BadAnswer(f"{path}: HTTP 401 with a fresh session token")


def _aws_token(ask: Ask, cache: MutableMapping[str, Any], now: datetime, fresh: bool) -> str:
    """The IMDSv2 session token: the cached one while it lives, else a new one."""
    held = cache.get("imds_token")
    if not fresh and held is not None and held[1] > now:
        return str(held[0])
    answer = ask(
        "PUT", TOKEN_PATH, {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)}
    )
    # The token's own text is never quoted: it is a credential.
    if answer.error is not None:
        raise BadAnswer(f"PUT {TOKEN_PATH}: {answer.error}")
    if answer.status != 200:
        _judge(answer, f"PUT {TOKEN_PATH}")
    token = answer.body.strip()
    if not token or any(c.isspace() or not c.isprintable() for c in token) or len(token) > 1024:
        raise BadAnswer(f"PUT {TOKEN_PATH}: no session token in the answer")
    cache["imds_token"] = (token, now + timedelta(seconds=TOKEN_TTL_SECONDS - 60))
    return token


# --- GCE -----------------------------------------------------------------------------------


def _gce_get(ask: Ask, path: str, allowed: tuple[str, ...]) -> str:
    answer = ask("GET", path, {"Metadata-Flavor": "Google"})
    _judge(answer, path)
    if answer.header("Metadata-Flavor") != "Google":
        raise BadAnswer(
            f"{path}: the answer lacks Metadata-Flavor: Google (not the metadata server)"
        )
    value = answer.body.strip()
    if value not in allowed:
        raise BadAnswer(f"{path}: {value[:MAX_QUOTED]!r} is none of {', '.join(allowed)}")
    return value


def _gcp(
    ask: Ask, answers: dict[str, str], cache: MutableMapping[str, Any], now: datetime
) -> list[Notice]:
    notices = []
    preempted = _gce_get(ask, GCE_PREEMPTED, ("TRUE", "FALSE"))
    answers[GCE_PREEMPTED] = preempted
    if preempted == "TRUE":
        when = now + GCE_PREEMPTION_NOTICE
        notices.append(Notice(PREEMPTION, GCE_PREEMPTED, "preempted", when, estimated=True))
    event = _gce_get(
        ask,
        GCE_MAINTENANCE,
        ("NONE", "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE"),
    )
    answers[GCE_MAINTENANCE] = event
    # A live migration keeps the VM running (GPU VMs are never migrated: they terminate).
    if event == "TERMINATE_ON_HOST_MAINTENANCE":
        notices.append(Notice(MAINTENANCE, GCE_MAINTENANCE, event))
    return notices


# --- Azure ---------------------------------------------------------------------------------


def _azure(
    ask: Ask, answers: dict[str, str], cache: MutableMapping[str, Any], now: datetime
) -> list[Notice]:
    answer = ask("GET", AZURE_EVENTS, {"Metadata": "true"})
    _judge(answer, AZURE_EVENTS)
    document = _json(answer, AZURE_EVENTS)
    if not isinstance(document, dict) or not isinstance(document.get("Events"), list):
        raise BadAnswer(
            f'{AZURE_EVENTS}: expected {{"DocumentIncarnation", "Events": [...]}}'
            f"{_quote(answer.body)}"
        )
    events = document["Events"]
    answers[AZURE_EVENTS] = (
        f"incarnation {document.get('DocumentIncarnation')}, {len(events)} events"
    )
    if not events:
        return []
    name = _azure_name(ask, cache)
    notices = []
    for event in events:
        if not isinstance(event, dict) or not isinstance(event.get("EventType"), str):
            raise BadAnswer(f'{AZURE_EVENTS}: an event without its "EventType"')
        resources = event.get("Resources") or []
        if not isinstance(resources, list) or name not in resources:
            continue  # another VM of the availability set or scale set
        kind = event["EventType"]
        if kind == "Preempt":
            notice_kind = PREEMPTION
        elif kind in AZURE_MAINTENANCE_TYPES:
            notice_kind = MAINTENANCE
        else:
            continue  # a type this reader does not know
        when = _http_date(event.get("NotBefore", ""), AZURE_EVENTS, now)
        detail = f"{kind} {event.get('EventStatus', '')} ({event.get('EventId', 'no id')})"
        if event.get("Description"):
            detail += f": {event['Description']}"
        notices.append(Notice(notice_kind, f"{AZURE_EVENTS} {kind}", detail, when))
    return notices


def _azure_name(ask: Ask, cache: MutableMapping[str, Any]) -> str:
    """This VM's name, as Scheduled Events' `Resources` name it (asked once)."""
    if "azure_name" in cache:
        return str(cache["azure_name"])
    answer = ask("GET", AZURE_NAME, {"Metadata": "true"})
    _judge(answer, AZURE_NAME)
    name = answer.body.strip()
    if not name:
        raise BadAnswer(f"{AZURE_NAME}: no VM name in the answer")
    cache["azure_name"] = name
    return name
