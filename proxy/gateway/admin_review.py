"""The review API for shadow mismatches (under ``/admin``, same guard as the admin API).

- ``GET  /admin/shadow/review``: mismatches, newest first (``limit``, ``backend``,
  ``draft_version``, ``label`` = any | unlabeled | noise | drift);
- ``GET  /admin/shadow/review/{id}``: one case, both continuations aligned at the
  divergence, the reference's top-k there, the label history;
- ``POST /admin/shadow/review/{id}/label``: ``{"label": "noise"|"drift", "by": ..., "note": ...}``;
- ``GET  /admin/shadow/labels.jsonl``: the labels in force, one JSON object a line.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proxy.errors import GatewayError
from proxy.gateway.admin import require_admin
from proxy.gateway.responses import OrjsonResponse
from proxy.verify.review import LabelFilter, MismatchQuery, ReviewBook, UnknownMismatch

LABEL_FILTERS: tuple[LabelFilter, ...] = ("any", "unlabeled", "noise", "drift")


class LabelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: Literal["noise", "drift"]
    by: str = Field(min_length=1, max_length=200)
    note: str = Field(default="", max_length=4000)


def _book(request: Request) -> ReviewBook:
    book: ReviewBook = request.app.state.review
    return book


def _label_filter(value: str) -> LabelFilter:
    for known in LABEL_FILTERS:
        if value == known:
            return known
    raise GatewayError(400, f"label must be one of {', '.join(LABEL_FILTERS)}", param="label")


def _parse_label(raw: bytes) -> LabelBody:
    try:
        return LabelBody.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise GatewayError(400, f"{param or 'body'}: {first['msg']}", param=param) from None


def _unknown(record_id: str) -> GatewayError:
    return GatewayError(
        404, f"no shadow mismatch with id {record_id!r}", param="id", code="mismatch_not_found"
    )


def review_router() -> APIRouter:
    router = APIRouter(prefix="/admin/shadow", dependencies=[Depends(require_admin)])

    @router.get("/review")
    async def list_mismatches(
        request: Request,
        limit: int = 50,
        backend: str | None = None,
        draft_version: str | None = None,
        label: str = "any",
    ) -> OrjsonResponse:
        if not 1 <= limit <= 1000:
            raise GatewayError(400, "limit must lie in [1, 1000]", param="limit")
        query = MismatchQuery(limit, backend, draft_version, _label_filter(label))
        return OrjsonResponse({"mismatches": await _book(request).mismatches(query)})

    @router.get("/review/{record_id}")
    async def read_mismatch(request: Request, record_id: str) -> OrjsonResponse:
        try:
            return OrjsonResponse(await _book(request).read(record_id))
        except UnknownMismatch:
            raise _unknown(record_id) from None

    @router.post("/review/{record_id}/label")
    async def label_mismatch(request: Request, record_id: str) -> OrjsonResponse:
        body = _parse_label(await request.body())
        try:
            label = await _book(request).label(record_id, body.label, body.by, body.note)
        except UnknownMismatch:
            raise _unknown(record_id) from None
        return OrjsonResponse(label.to_dict())

    @router.get("/labels.jsonl")
    async def export_labels(request: Request) -> Response:
        return Response(await _book(request).export_jsonl(), media_type="application/x-ndjson")

    return router
