"""The job's options: command-line flags on top of an optional YAML file (`--config job.yaml`).

One table, `OPTIONS`, names every option once: its flag, its YAML key (the
flag without dashes, `-` or `_` alike), its type and default. A YAML file may
set any of them; flags given on the command line win. Unknown keys and values
of the wrong type are refused with one line naming the key.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import yaml

from pipeline.config import JobConfig, Resources
from pipeline.encode.compile_cache import DEFAULT_COMPILE_CACHE
from pipeline.encode.encoder import DTYPES, EncoderConfig, parse_mesh
from pipeline.encode.placement import ACCELERATORS
from pipeline.errors import ConfigError
from pipeline.extract import PDF_EXTRACTORS
from pipeline.extract.sandbox import ExtractConfig
from pipeline.text.chunking import CHUNKING_MODES

ON_OFF = ("on", "off")


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str
    type: type
    help: str
    default: Any = None
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    repeated: bool = False  # a list in YAML, a repeatable flag on the command line
    required: bool = False

    @property
    def key(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


OPTIONS = (
    Option(
        "--input",
        str,
        "file, directory or shard: a local path, file://, s3:// or gs:// URI; repeatable",
        metavar="URI",
        repeated=True,
        required=True,
    ),
    Option("--output", str, "output directory (local path or URI)", metavar="URI", required=True),
    Option(
        "--model",
        str,
        "model directory, its URI, or a Hugging Face Hub id org/name[@revision] (default: bundled all-MiniLM-L6-v2)",
        metavar="DIR|URI|HUB_ID",
    ),
    Option(
        "--max-tokens",
        int,
        "tokens per chunk incl. special tokens and prompt, up to the model's positions "
        "(default: the model's max_seq_length)",
        metavar="N",
    ),
    Option(
        "--prompt",
        str,
        "a prompt name of the model's (config_sentence_transformers.json) or the prompt text, "
        "put before every chunk; '' for none (default: the model's default prompt, if any)",
        metavar="NAME|TEXT",
    ),
    Option("--dim", int, "keep the first N dimensions, re-normalised (Matryoshka; default: all)", metavar="N"),
    Option("--overlap", int, "tokens shared by neighbouring chunks (default 32)", 32, metavar="N"),
    Option(
        "--chunking",
        str,
        "where chunks end: at paragraph, sentence or word boundaries near the window's end (boundaries), "
        f"or exact token windows that may end mid-word (window); default {CHUNKING_MODES[0]}",
        CHUNKING_MODES[0],
        choices=CHUNKING_MODES,
    ),
    Option(
        "--batch-size",
        int,
        "sequences per device per batch at full length (default: 4 on CPU, 64 on GPU/TPU)",
        metavar="N",
    ),
    Option(
        "--packing",
        str,
        "several sequences per row of the window (on), or one per length bucket (off); default on",
        "on",
        choices=ON_OFF,
    ),
    Option(
        "--mesh",
        str,
        "each encoder's device mesh; model splits heads and MLP (default: all local devices on data)",
        metavar="data=N,model=M",
    ),
    Option("--dtype", str, "encoder compute dtype (default float32)", "float32", choices=tuple(sorted(DTYPES))),
    Option("--attention", str, "attention implementation (default auto)", "auto", metavar="IMPL"),
    Option("--accelerator", str, "where encoders run (default auto)", "auto", choices=ACCELERATORS),
    Option("--encoders", int, "CPU encoder actors (default: one per node)", metavar="N"),
    Option(
        "--compile-cache",
        str,
        f"persistent JAX compilation cache; '' turns it off (default {DEFAULT_COMPILE_CACHE})",
        str(DEFAULT_COMPILE_CACHE),
        metavar="DIR",
    ),
    Option("--profile", str, "write a JAX profiler trace of each encoder actor under DIR (on its node)", metavar="DIR"),
    Option(
        "--pdf-extractor",
        str,
        "PDF text extractor: auto takes the fastest installed (default auto)",
        "auto",
        choices=("auto", *PDF_EXTRACTORS),
    ),
    Option(
        "--extract-timeout",
        int,
        f"seconds one document's extraction may take (default {ExtractConfig.timeout_s})",
        ExtractConfig.timeout_s,
        metavar="S",
    ),
    Option(
        "--extract-memory",
        int,
        f"MiB of memory one document's extraction may take (default {ExtractConfig.memory_mib})",
        ExtractConfig.memory_mib,
        metavar="MIB",
    ),
    Option("--overwrite", bool, "start afresh instead of keeping or resuming the output", False),
    Option("--group-size", int, "files committed together (default 64)", 64, metavar="N"),
    Option("--id-field", str, "document id field of jsonl/parquet shards (default id)", "id", metavar="NAME"),
    Option("--text-field", str, "text field of jsonl/parquet shards (default text)", "text", metavar="NAME"),
    Option("--quiet", bool, "print only warnings, errors and the run summary", False),
    Option("--verbose", bool, "print Ray's own progress and INFO lines as well", False),
)
_BY_KEY = {o.key: o for o in OPTIONS}


def _parser(description: str) -> argparse.ArgumentParser:
    # Defaults are applied after the YAML file, so the parser reports only what was typed.
    p = argparse.ArgumentParser(prog="jobs/embed.py", description=description, argument_default=argparse.SUPPRESS)
    p.add_argument("--config", metavar="YAML", help="read options from a YAML file; flags override it")
    for o in OPTIONS:
        _add_argument(p, o)
    return p


def add_job_options(parser: argparse.ArgumentParser, keys: tuple[str, ...]) -> None:
    """The job's options named by `keys`, with their defaults, for tools beside the job (jobs/capacity.py)."""
    for key in keys:
        _add_argument(parser, _BY_KEY[key], standalone=True)


def _add_argument(p: argparse.ArgumentParser, o: Option, *, standalone: bool = False) -> None:
    """`standalone`: the parser applies the default and `required` itself (no YAML file beneath it)."""
    extra = {"default": o.default} if standalone else {}
    if o.type is bool:
        p.add_argument(o.flag, action="store_true", help=o.help, **extra)
        return
    if standalone:
        extra["required"] = o.required
    p.add_argument(
        o.flag,
        type=o.type,
        help=o.help,
        metavar=o.metavar,
        choices=o.choices or None,
        action="append" if o.repeated else "store",
        **extra,
    )


def _check_value(o: Option, value: Any, where: str) -> Any:
    if o.choices == ON_OFF and isinstance(value, bool):  # YAML reads a bare `on`/`off` as a boolean
        value = ON_OFF[not value]
    items = value if o.repeated and isinstance(value, list) else [value]
    for item in items:
        ok = isinstance(item, o.type) and not (o.type is int and isinstance(item, bool))
        if not ok and item is not None:
            raise ConfigError(
                f"{where}: {o.key} must be {'a list of ' if o.repeated else ''}{o.type.__name__}, got {item!r}"
            )
        if o.choices and item not in o.choices:
            raise ConfigError(f"{where}: {o.key} must be one of {', '.join(o.choices)}, got {item!r}")
    return items if o.repeated else value


def read_config_file(path: str) -> dict[str, Any]:
    """Options from a YAML mapping, checked key by key."""
    try:
        with open(path) as f:
            raw = yaml.safe_load(f) or {}
    except OSError as e:
        raise ConfigError(f"cannot read --config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path} must hold a mapping of option: value")
    values = {}
    for key, value in raw.items():
        option = _BY_KEY.get(str(key).replace("-", "_"))
        if option is None:
            raise ConfigError(f"--config {path}: unknown key {key!r}; known: {', '.join(sorted(_BY_KEY))}")
        values[option.key] = _check_value(option, value, f"--config {path}")
    return values


def encoder_config(values: dict[str, Any]) -> EncoderConfig:
    """The encoder's options, by key, -> EncoderConfig."""
    return EncoderConfig(
        dtype=values["dtype"],
        attention=values["attention"],
        batch_size=values["batch_size"],
        packing=values["packing"] == "on",
        mesh=parse_mesh(values["mesh"]) if values["mesh"] else (),
        dim=values["dim"],
    )


def extract_config(values: dict[str, Any]) -> ExtractConfig:
    """The extraction options, by key, -> ExtractConfig."""
    return ExtractConfig(
        pdf_extractor=values["pdf_extractor"], timeout_s=values["extract_timeout"], memory_mib=values["extract_memory"]
    )


def parse_job_args(argv: list[str], description: str = "") -> JobConfig:
    """Command line (and its --config file) -> the validated JobConfig."""
    typed = vars(_parser(description).parse_args(argv))
    from_file = read_config_file(typed.pop("config")) if "config" in typed else {}
    values = {o.key: o.default for o in OPTIONS} | from_file | typed
    for o in OPTIONS:
        if o.required and not values[o.key]:
            raise ConfigError(f"{o.flag} is required (on the command line or in --config)")
    if values["quiet"] and values["verbose"]:
        raise ConfigError("--quiet and --verbose exclude each other")
    return JobConfig(
        inputs=tuple(values["input"]),
        output=values["output"],
        model=values["model"],
        max_tokens=values["max_tokens"],
        overlap=values["overlap"],
        chunking=values["chunking"],
        prompt=values["prompt"],
        encoder=encoder_config(values),
        extract=extract_config(values),
        resources=Resources(encode_actors=values["encoders"]),
        accelerator=values["accelerator"],
        compile_cache=values["compile_cache"] or None,
        profile=values["profile"],
        overwrite=values["overwrite"],
        group_size=values["group_size"],
        id_field=values["id_field"],
        text_field=values["text_field"],
        verbosity="quiet" if values["quiet"] else "verbose" if values["verbose"] else "normal",
    )
