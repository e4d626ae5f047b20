"""Daft's document-embedding pipeline on local PDFs, for bench/daft_peer.py.

    .venv-daft/bin/python bench/daft_worker.py INPUT_DIR OUTPUT_DIR MODEL_DIR

The shape of Daft's published benchmark (Eventual-Inc/Daft,
benchmarking/ai/document_embedding): PyMuPDF page texts of PDFs up to 100
pages, LangChain's RecursiveCharacterTextSplitter (2,048 characters, 200
overlap) per page, sentence-transformers in a Daft class in batches of 10, no
`torch.compile`, Parquet out. It runs on Daft's local runner, as a user on one
machine would run it, and reads a directory rather than an S3 metadata table.
Prints one JSON line: documents, chunks and the seconds the pipeline took.
"""

from __future__ import annotations

import json
import sys
import time

import daft
import pymupdf
from daft import DataType, col
from langchain_text_splitters import RecursiveCharacterTextSplitter

MAX_PDF_PAGES = 100
CHUNK_SIZE, CHUNK_OVERLAP = 2048, 200
EMBEDDING_BATCH_SIZE = 10
PAGES = DataType.list(DataType.struct({"text": DataType.string(), "page_number": DataType.int64()}))
CHUNKS = DataType.list(DataType.struct({"text": DataType.string(), "chunk_id": DataType.int64()}))


def page_texts(pdf: bytes) -> list[dict] | None:
    try:
        doc = pymupdf.Document(stream=pdf, filetype="pdf")
        if len(doc) > MAX_PDF_PAGES:
            return None
        return [{"text": page.get_text(), "page_number": page.number} for page in doc]
    except Exception:  # the published script drops any PDF PyMuPDF cannot read
        return None


def chunks(text: str) -> list[dict]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
    return [{"text": t, "chunk_id": i} for i, t in enumerate(splitter.split_text(text))]


def main(input_dir: str, output_dir: str, model_dir: str) -> None:
    @daft.cls(max_concurrency=1)
    class Embedder:
        def __init__(self):
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(model_dir, device="cpu")

        @daft.method.batch(
            return_dtype=DataType.fixed_size_list(DataType.float32(), 384), batch_size=EMBEDDING_BATCH_SIZE
        )
        def __call__(self, texts):
            return self.model.encode(texts.to_pylist()) if len(texts) else []

    started = time.monotonic()
    df = daft.from_glob_path(f"{input_dir}/**/*.pdf").select(col("path"))
    df = df.with_column("pages", col("path").download().apply(page_texts, return_dtype=PAGES))
    df = df.explode("pages").with_columns(
        {"page_text": col("pages")["text"], "page_number": col("pages")["page_number"]}
    )
    df = df.where(col("page_text").not_null())
    df = df.with_column("chunks", col("page_text").apply(chunks, return_dtype=CHUNKS))
    df = df.explode("chunks").with_columns({"chunk": col("chunks")["text"], "chunk_id": col("chunks")["chunk_id"]})
    df = df.where(col("chunk").not_null())
    df = df.with_column("embedding", Embedder()(col("chunk")))
    df.select("path", "page_number", "chunk_id", "chunk", "embedding").write_parquet(output_dir)
    seconds = time.monotonic() - started

    out = daft.read_parquet(f"{output_dir}/*.parquet")
    summary = out.agg(col("path").count_distinct().alias("documents"), col("chunk").count().alias("chunks")).to_pydict()
    print(json.dumps({"documents": summary["documents"][0], "chunks": summary["chunks"][0], "seconds": seconds}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
