"""The encode stage: packs in, one embedded row per chunk out, in the dtype the job's driver recorded."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kernels.attention import IMPLS
from pipeline.encode import model_dir
from pipeline.encode.encoder_config import EncoderConfig
from pipeline.encode.packs import unpack
from pipeline.encode.stage import EncodeBlock
from pipeline.errors import ConfigError, ModelError
from pipeline.run.stages import ChunkBlock
from pipeline.schemas import DOC_SCHEMA, error_row, rows_digest
from pipeline.text.chunking import ChunkingConfig

from support import tiny_notes


def test_an_encoder_whose_cpu_would_not_run_the_drivers_bfloat16_refuses_to_start(cpu_flags):
    """The driver's CPU had bfloat16 dot instructions and chose bfloat16; this node's CPU has none (its
    flags are given, so that the test holds on any CPU)."""
    cpu_flags("avx2", "fma")
    refusing = EncodeBlock(None, EncoderConfig(dtype="bfloat16"))  # at its first call, which reaches the driver
    with pytest.raises(ConfigError, match="this encoder's node runs float32 where the job's driver chose bfloat16"):
        refusing(pa.table({}))


def test_an_encoder_runs_the_drivers_float32_on_any_cpu(cpu_flags):
    cpu_flags("avx512_bf16", "amx_bf16")
    assert EncodeBlock(None, EncoderConfig(dtype="float32")).encoder.dtype == "float32"


def test_an_encoder_whose_node_holds_other_model_files_than_the_drivers_refuses_to_start():
    """A node's copy of the model (its cache of a URI, a path on its own disk) that differs from the driver's would
    write other numbers under the output's fingerprint."""
    refusing = EncodeBlock(None, EncoderConfig(), model_fingerprint="0123456789abcdef")
    with pytest.raises(ModelError, match="this encoder's node holds other files for model .* than the job's driver"):
        refusing(pa.table({}))
    assert EncodeBlock(None, EncoderConfig(), model_fingerprint=model_dir.resolve(None).fingerprint).encoder


def test_a_call_of_packs_embeds_each_chunk_once_errors_null_and_pads_little():
    """128 packs of 17-token notes, as the job hands a call (`encode_call_packs` on a 2-core CPU): one row out
    per chunk, null embeddings on error rows, and the notes fill the encoder's rows, where 128 chunk rows of
    the same notes were one full batch and a padded tail (BENCHMARKS.md: 84.6% of tokens real)."""
    notes = tiny_notes(2048)
    failed = error_row({"doc_id": "broken.pdf", "kind": "pdf", "pages": None}, "extract", "CorruptPDF", "bad xref")
    docs = pa.Table.from_pylist(notes[:1000] + [failed] + notes[1000:], schema=DOC_SCHEMA)
    chunker = ChunkBlock(None, ChunkingConfig(max_tokens=256, overlap=32), call_packs=1)
    packs = pa.concat_tables(chunker(docs.slice(lo, 16)) for lo in range(0, docs.num_rows, 16))
    calls = []
    out = EncodeBlock(None, EncoderConfig(), record=calls.append)(packs)

    assert out.column("doc_id").to_pylist() == docs.column("doc_id").to_pylist()
    errors = pc.is_valid(out.column("error_type")).to_pylist()
    assert errors.index(True) == 1000 and sum(errors) == 1
    assert out.column("embedding").null_count == 1 and out.column("embedding")[1000].as_py() is None
    (call,) = calls
    stats = call.encoder.stats
    assert stats.real_tokens == sum(len(t) for t in unpack(packs).column("token_ids").to_pylist())
    assert stats.real_tokens / stats.computed_tokens >= 0.97
    assert call.call == f"encode:{rows_digest(unpack(packs))}/0"  # named by its rows: a retry replaces it
    # What ran, for the report: `auto` named the kernels it chose for each shape traced in this process
    # (this encoder's, and any other's the process ran before it).
    ran = call.encoder.ran
    assert ran["dtype"] == "float32" and ran["packing"] and set(ran["mesh"]) >= {"data"}
    assert {a["impl"] for a in ran["attention"]} <= set(IMPLS)
    assert {shape[1] for shape in call.encoder.compiled_shapes} <= {a["kv_seq"] for a in ran["attention"]}
    assert ("xla", "float32") in {(d["impl"], d["weights"]) for d in ran["dense"]}
