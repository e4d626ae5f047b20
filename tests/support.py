"""Paths and helpers the tests share (imported by name; conftest.py only holds fixtures)."""

from __future__ import annotations

import io
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
CORPUS = REPO.parent / "shared" / "corpus" / "py-pdf-sample-files"


def encrypt(pdf: bytes, *, user_password: str, owner_password: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
