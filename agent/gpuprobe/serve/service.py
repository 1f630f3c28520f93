"""The `gpuprobe.v1.NodeDiagnostics` gRPC service: the report, on demand checks, watches,
clearing sticky findings, and the two bandwidth RPCs of the mesh (`measure.bandwidth`).

GetReport and WatchReports read what the store last rendered; only RunChecks and
ClearFindings run checks, and they are guarded (token or client certificate) and
rate-limited per caller.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import grpc

from gpuprobe import wire
from gpuprobe.checks import registry
from gpuprobe.checks.record import ClearStateError, NoSuchGpu
from gpuprobe.checks.registry import clearable
from gpuprobe.daemon.scheduler import Scheduler
from gpuprobe.daemon.store import AgentState, ReportStore
from gpuprobe.measure.bandwidth import BandwidthTests, Refused
from gpuprobe.report import NodeReport, now
from gpuprobe.serve import bandwidth as wiring
from gpuprobe.serve.limits import RateLimiter
from gpuprobe.serve.logs import Throttle
from gpuprobe.serve.security import Guard, caller
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc

log = logging.getLogger("gpuprobe.serve")

SERVICE_NAME = "gpuprobe.v1.NodeDiagnostics"
# Forgets the sticky findings (the checks' records' `clear`: XIDs) of one GPU (or all, None);
# returns how many it forgot.
ClearXid = Callable[[int | None], int]
# Kept back from the caller's deadline so the answer still reaches it in time.
DEADLINE_MARGIN_SECONDS = 0.2
# The most characters of a refusal's words a call ends with (grpc-message, percent-encoded, must
# stay well within a client's metadata bound).
MAX_DETAILS = 1024
# How often a watch stream looks whether its caller left or the agent stops.
WATCH_POLL_SECONDS = 1.0


class NodeDiagnosticsService(pb_grpc.NodeDiagnosticsServicer):
    """The agent's gRPC API over its report store and scheduler."""

    def __init__(
        self,
        store: ReportStore,
        scheduler: Scheduler,
        checks: Sequence[str],
        guard: Guard,
        limiter: RateLimiter,
        max_watchers: int,
        stopping: threading.Event,
        clear_xid: ClearXid | None = None,
        bandwidth: BandwidthTests | None = None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.checks = list(checks)
        self.guard = guard
        self.limiter = limiter
        self.stopping = stopping
        self.clear_xid = clear_xid
        self.bandwidth = bandwidth
        self._watchers = threading.BoundedSemaphore(max_watchers)
        self._refusals = Throttle()
        self._report: pb.NodeReport | None = None
        self._watched: tuple[int, pb.NodeReport | None] = (0, None)  # (change, report)
        self._response: pb.GetReportResponse | None = None
        self._summary: pb.GetReportResponse | None = None
        self._rendered: NodeReport | None = None

    def render(self, state: AgentState) -> None:
        """Build the messages once per update of the report (a sink of the store); calls only
        hand them out (an update of the bandwidth results alone leaves the report, and them,
        as they are)."""
        if state.report is None or state.report is self._rendered:
            return
        self._rendered = state.report
        report = wire.report_to_proto(state.report, state.check_times)
        self._report = report
        self._watched = (state.change, report)
        self._response = pb.GetReportResponse(report=report)
        summary = wire.summary_to_proto(
            state.report, state.check_times, keep=registry.summary_keys()
        )
        self._summary = pb.GetReportResponse(report=summary)

    # --- read-only -----------------------------------------------------------------------

    def GetReport(self, request: pb.GetReportRequest, context: Any) -> pb.GetReportResponse:
        """The cached report, whole or its summary view."""
        response = self._summary if request.view == pb.REPORT_VIEW_SUMMARY else self._response
        if response is None:
            abort(context, grpc.StatusCode.UNAVAILABLE, "the first round of checks is running")
        return response

    def WatchReports(
        self, request: pb.WatchReportsRequest, context: Any
    ) -> Iterator[pb.WatchReportsResponse]:
        """The report now, then each changed one, until the caller leaves or the agent stops."""
        if not self._watchers.acquire(blocking=False):
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "too many WatchReports streams")
        try:
            sent = 0
            while context.is_active() and not self.stopping.is_set():
                change, report = self._watched
                if report is not None and change > sent:
                    sent = change
                    yield pb.WatchReportsResponse(report=report)
                self.store.wait_change(sent, WATCH_POLL_SECONDS)
        finally:
            self._watchers.release()

    # --- guarded -------------------------------------------------------------------------

    def RunChecks(self, request: pb.RunChecksRequest, context: Any) -> pb.RunChecksResponse:
        """Run the named checks now, within the caller's deadline."""
        self._admit(context, limited=True)
        unknown = sorted(set(request.checks) - set(self.checks))
        if unknown:
            abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown check {unknown[0]!r} (known: {', '.join(self.checks)})",
            )
        wanted = set(request.checks) or set(self.checks)
        names = [n for n in self.checks if n in wanted]
        ran = self.scheduler.run_now(names, _within(context))
        # The checks' own fresh results (docs/grpc.md); the merged report, GetReport's, is
        # the one the pipeline's post-passes went over.
        report = NodeReport(self.store.node, now(), [r.result for r in ran])
        times = {r.result.name: r.time for r in ran}
        return pb.RunChecksResponse(report=wire.report_to_proto(report, times))

    def ClearFindings(
        self, request: pb.ClearFindingsRequest, context: Any
    ) -> pb.ClearFindingsResponse:
        """Forget sticky findings (the xid check's), then re-run the checks that keep them so
        the report shows it."""
        self._admit(context, limited=True)
        clear_xid = self.clear_xid
        if clear_xid is None:
            abort(context, grpc.StatusCode.UNIMPLEMENTED, "this agent keeps no sticky findings")
        gpu = request.gpu if request.HasField("gpu") else None
        try:
            cleared = int(clear_xid(gpu))
        except NoSuchGpu as exc:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc).removeprefix("clear-xid: "))
        except ClearStateError as exc:  # the state directory is missing, read-only or corrupt
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"clearing failed: {exc}")
        except Exception as exc:  # the node's fault, told to the caller in one line
            log.exception("clearing sticky findings failed")
            abort(context, grpc.StatusCode.INTERNAL, f"clearing failed: {exc}")
        log.info("sticky findings cleared", extra={"gpu": gpu, "cleared": cleared})
        rerun = clearable(self.checks)
        if rerun:
            self.scheduler.run_now(rerun, _within(context))
        return pb.ClearFindingsResponse(cleared=cleared, report=self._report)

    def MeasureBandwidth(
        self, request: pb.MeasureBandwidthRequest, context: Any
    ) -> pb.MeasureBandwidthResponse:
        """Measure this agent's bandwidth toward the peer agent the request names."""
        self._admit(context, limited=False)
        if self.bandwidth is None:
            abort(context, grpc.StatusCode.UNIMPLEMENTED, "this agent runs no bandwidth tests")
        try:
            response = wiring.result_message(
                self.bandwidth.measure(wiring.measure_request(request))
            )
        except Refused as exc:
            context.set_trailing_metadata(wiring.failure_metadata(exc))
            abort(context, wiring.status(exc), str(exc))
        log.info(
            "bandwidth measured",
            extra={
                "peer": response.peer,
                "transport": response.transport,
                "bytes_per_second": response.bytes_per_second,
            },
        )
        return response

    def OpenBandwidthSink(
        self, request: pb.OpenBandwidthSinkRequest, context: Any
    ) -> pb.OpenBandwidthSinkResponse:
        """Open a one-time sink for the calling agent's test."""
        self._admit(context, limited=False)
        if self.bandwidth is None:
            abort(context, grpc.StatusCode.UNIMPLEMENTED, "this agent runs no bandwidth tests")
        try:
            sink = self.bandwidth.open_sink(
                wiring.sink_request(request), wiring.peer_address(context)
            )
        except Refused as exc:
            abort(context, wiring.status(exc), str(exc))
        return wiring.sink_message(sink)

    def _admit(self, context: Any, limited: bool) -> None:
        """Abort the call unless its caller is authorised (and, if `limited`, within rate)."""
        verdict = self.guard.check(context)
        if not verdict.allowed:
            # Once a minute per caller and reason, with the count held back since.
            peer = context.peer()
            held = self._refusals.allow(f"{caller(context)} {verdict.reason}")
            if held is not None:
                log.warning(
                    "call refused",
                    extra={"peer": peer, "reason": verdict.reason, "held_back": held},
                )
            abort(context, verdict.code, verdict.reason)
        if limited:
            wait = self.limiter.allow(caller(context))
            if wait > 0:
                abort(
                    context,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"rate limit: try again in {wait:.0f} s",
                )


def abort(context: Any, code: grpc.StatusCode, details: str) -> NoReturn:
    """End the call with `code` (grpc's abort raises; this tells the type checker so). The
    details travel in the trailing metadata, which clients bound (gRPC's default: 8 KiB):
    past MAX_DETAILS characters they are cut, so the caller still reads why."""
    if len(details) > MAX_DETAILS:
        details = details[: MAX_DETAILS - 1] + "…"
    context.abort(code, details)
    raise AssertionError("grpc's abort returned")


def _within(context: Any) -> float | None:
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return max(0.0, float(remaining) - DEADLINE_MARGIN_SECONDS)
