"""The seed's SaaS: a document in, a validated analysis out.

    make run JOBSTREAM_APP=examples.document_analysis:app

A document (plain text, or a PDF sent as base64) -> a durable step that extracts its text ->
a structured `Analysis` from the model (`ctx.llm.parse`: summary, key points, risks with their
severity, overall sentiment), its JSON streamed to the page as it comes -> validated -> saved
as the job's `result.output`. A crash after the extraction does not extract again; an answer
that does not fit `Analysis` is asked again with its errors; every try's cost is recorded and
the tenant is charged once, for the accepted result.
"""

from __future__ import annotations

import base64
import binascii
import io
from typing import Literal

import pypdf
from pydantic import BaseModel, Field, model_validator

import jobstream

app = jobstream.App()

# What the model is shown of a long document: enough for an analysis, bounded in cost.
MAX_CHARS = 20_000


class Document(BaseModel):
    """A document to analyse: its text, or a PDF."""

    title: str = Field(default="Untitled", max_length=200, description="Shown with the result.")
    text: str | None = Field(
        default=None, max_length=500_000, description="The document as plain text."
    )
    pdf_base64: str | None = Field(
        default=None,
        description="Or a PDF file, base64-encoded.",
        json_schema_extra={"contentEncoding": "base64", "contentMediaType": "application/pdf"},
    )

    @model_validator(mode="after")
    def one_source(self) -> Document:
        if (self.text is None) == (self.pdf_base64 is None):
            raise ValueError("give the document's text or a PDF (pdf_base64), one of the two")
        return self


class Risk(BaseModel):
    description: str
    severity: Literal["low", "medium", "high"]


class Analysis(BaseModel):
    summary: str = Field(description="Two or three sentences.")
    key_points: list[str]
    risks: list[Risk]
    sentiment: Literal["positive", "neutral", "negative"]


def extract_text(document: Document) -> str:
    """The document's text (a plain function: it runs in a thread, PDF parsing is CPU work)."""
    if document.text is not None:
        return document.text
    assert document.pdf_base64 is not None
    try:
        reader = pypdf.PdfReader(io.BytesIO(base64.b64decode(document.pdf_base64, validate=True)))
        return "\n".join(page.extract_text() or "" for page in reader.pages)
    except (binascii.Error, pypdf.errors.PdfReadError) as exc:
        # No retry reads a broken file better.
        raise jobstream.PermanentError(f"the PDF cannot be read: {exc}") from exc


@app.job("document_analysis", input=Document, output=Analysis, max_attempts=3, timeout_s=300)
async def analyze(document: Document, ctx: jobstream.Context) -> Analysis:
    """Extract a document's text, then a structured analysis of it."""
    await ctx.progress(0.05, "reading the document")
    text = await ctx.step("extract", extract_text, document)
    if not text.strip():
        raise jobstream.PermanentError("the document has no text to analyse")
    await ctx.progress(0.25, f"analysing {len(text.split()):,} words")
    analysis = await ctx.llm.parse(
        Analysis,
        instructions=(
            "You analyse business documents. Answer with a short summary, the key points, "
            "the risks with their severity, and the document's overall sentiment."
        ),
        prompt=f"Title: {document.title}\n\n{text[:MAX_CHARS]}",
        max_tokens=1024,
    )
    await ctx.progress(1.0, "analysed")
    return analysis
