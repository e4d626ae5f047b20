"""The output's fingerprint: what made its numbers, recorded first and checked by every rerun."""

from __future__ import annotations

import hashlib
import json

from pipeline.io.uris import redact


def fingerprint(spec, chunking, encoder, pdf_extractor: str, fields) -> dict:
    """What makes this output's numbers: the model (weights, architecture, tokenizer, head), chunking (window,
    overlap, mode) and prompt, compute dtype, output dimension (None: the model's), PDF extractor, and the
    shards' id and text fields (`pipeline.io.shards.ShardFields`): another text field embeds other texts under
    the same doc_ids."""
    settings = {
        "model_fingerprint": spec.fingerprint,
        "weights_sha256": spec.weights_sha256,
        "tokenizer_sha256": spec.tokenizer_sha256,
        "max_tokens": chunking.max_tokens,
        "overlap": chunking.overlap,
        "chunking": chunking.mode,
        "prompt": chunking.prompt,
        "dtype": encoder.dtype,
        "dim": encoder.dim,
        "pdf_extractor": pdf_extractor,
        "id_field": fields.id,
        "text_field": fields.text,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return {"fingerprint": digest, "model": redact(spec.model_id), **settings}


def same_run(recorded: dict, manifest: dict) -> bool:
    """Whether an output's recorded manifest is this run's: the same fingerprint and inputs (where recorded: an
    output from before they were is taken at its word, as it was)."""
    inputs = manifest.get("inputs")
    return recorded.get("fingerprint") == manifest["fingerprint"] and recorded.get("inputs", inputs) == inputs


def mismatch(output: str, recorded: dict, manifest: dict, *, finished: bool = False) -> str:
    # The manifest's keys, but for the weights' and tokenizer's digests: model_fingerprint covers both.
    keys = [k for k in manifest if k != "fingerprint" and not k.endswith("_sha256")]
    differs = [
        f"{k} {recorded.get(k)!r} there, {manifest.get(k)!r} now" for k in keys if recorded.get(k) != manifest.get(k)
    ]
    settings = recorded.get("fingerprint") != manifest["fingerprint"]
    if settings:  # one of the keys above, or, for an output an older docembed made, what it fingerprinted then
        differs.insert(0, f"fingerprint {recorded.get('fingerprint')} there, {manifest['fingerprint']} now")
    what = (
        "--overwrite redoes it with these"
        if finished
        else "resume it with the same inputs and settings, or start afresh with --overwrite"
    )
    made = "made with other settings" if settings else "made from other inputs"
    return (
        f"output {redact(output)} holds {'a finished' if finished else 'an unfinished'} run {made} "
        f"({'; '.join(differs)}); {what}"
    )
