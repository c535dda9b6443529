"""A chat's answer over SSE: the job's message as the Vercel AI SDK's UI message stream
(server/ui_message_stream.py), read as every reader reads a job's log (the table, then the hub),
or, for a job that has ended, from its row at once.
"""

from __future__ import annotations

from starlette.responses import Response

from jobstream.events import Event
from jobstream.job_reads import Snapshot
from jobstream.rows import JobRow
from jobstream.server import event_stream, ui_message_stream
from jobstream.server.state import AppState
from jobstream.server.stream_slots import Slot
from jobstream.server.tail_stream import TailStream
from jobstream.server.ui_message_stream import DONE, UIMessageChunks, frames

HEADERS = (*event_stream.HEADERS, ui_message_stream.HEADER)


def first_attempt(job: JobRow) -> int:
    """The first attempt whose text a stream opened now may tell: the one running, or, for a job
    queued again after an attempt, the next (the queued job's attempts are all over)."""
    return job.attempts + 1 if job.status == "queued" else job.attempts


class ChatStream(TailStream):
    """The message of a job not ended when it was read: from the log's start, live to its end."""

    stream_headers = HEADERS

    def __init__(self, app: AppState, job: JobRow, slot: Slot) -> None:
        super().__init__(
            app, job.id, 0, last_seq=job.last_seq, live=True, slot=slot,
            send_timeout_s=app.settings.sse_send_timeout_s,
        )  # fmt: skip
        self._told = UIMessageChunks(job.id, from_attempt=first_attempt(job))

    def opening(self) -> bytes:
        return frames(self._told.opening())

    def chunk(self, batch: list[Event]) -> bytes:
        told = frames(self._told.feed(batch))
        return told + DONE if self._told.ended else told

    def told_the_end(self) -> bool:
        return self._told.ended

    def cut_short(self) -> bytes:
        return frames(self._told.interrupted()) + DONE


def finished_message(snap: Snapshot) -> Response:
    """The whole message of a job that has ended, in one answer: the accepted text (the result's),
    or the last attempt's for a job that failed or was cancelled."""
    job = snap.job
    done = {"status": job.status, "result": job.result, "error": job.error}
    text = (job.result or {}).get("text", "") if job.status == "succeeded" else snap.text
    chunks = ui_message_stream.finished(job.id, job.attempts, done, text)
    body = frames(chunks) + DONE
    return Response(body, headers={name.decode(): value.decode() for name, value in HEADERS})
