"""Every command's options in one table: command-line flags, and for `embed` a YAML file beneath them.

One table, `OPTIONS`, names every option of every command once: its flag, its
YAML key (the flag without dashes, `-` or `_` alike), its type, its default and
the commands that take it (`docembed COMMAND` and `jobs/COMMAND.py` alike).
Parsing a command line gives a value for every option of the table, the
table's default where the command does not take it or it was not given, so a
config builder below never meets a missing key (a test checks that every key a
command's builders read is one the command takes). `embed` also reads a YAML
file (`--config job.yaml`) that may set any of its options; flags given on the
command line win (`--no-FLAG` undoes a file's `FLAG: true`, and `--verbose` a
file's `quiet: true`). Unknown keys, a key given twice (`max-tokens` and
`max_tokens`) and values of the wrong type are refused with one line naming
the key.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import yaml

from kernels.compute_dtype import DTYPES
from kernels.dense import IMPLS as DENSE_IMPLS
from pipeline.cli import Parser
from pipeline.config import CapacityConfig, JobConfig, Resources
from pipeline.encode.compile_cache import DEFAULT_COMPILE_CACHE
from pipeline.encode.encoder_config import EncoderConfig, parse_mesh
from pipeline.encode.placement import ACCELERATORS
from pipeline.errors import ConfigError
from pipeline.extract import PDF_EXTRACTORS
from pipeline.extract.sandbox import ExtractConfig
from pipeline.text.chunking import CHUNKING_MODES, DEFAULT_OVERLAP

ON_OFF = ("on", "off")
# Switches of which one excludes the others: one turned on on the command line turns the file's others off.
EXCLUSIVE = (frozenset({"quiet", "verbose"}),)
# Which commands take an option: the job, and the capacity planner, which runs the job's stages on a sample.
EMBED = ("embed",)
EMBED_CAPACITY = ("embed", "capacity")


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
    commands: tuple[str, ...] = EMBED

    @property
    def key(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


OPTIONS = (
    Option(
        "--input",
        str,
        "files, directories or shards: local paths, file://, s3:// or gs:// URIs; repeatable",
        metavar="URI",
        repeated=True,
        required=True,
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--output",
        str,
        "output directory (local path or URI): the one embed writes, and search reads",
        metavar="URI",
        required=True,
        commands=("embed", "search"),
    ),
    Option("--query", str, "natural-language query", metavar="TEXT", required=True, commands=("search",)),
    Option("--top", int, "how many of the closest chunks to print (default 3)", 3, metavar="K", commands=("search",)),
    Option(
        "--model",
        str,
        "model directory, its URI, or a Hugging Face Hub id org/name[@revision] (default: bundled all-MiniLM-L6-v2)",
        metavar="DIR|URI|HUB_ID",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--max-tokens",
        int,
        "tokens per chunk incl. special tokens and prompt, up to the model's positions "
        "(default: the model's max_seq_length)",
        metavar="N",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--prompt",
        str,
        "a prompt name of the model's (config_sentence_transformers.json, e.g. search_query) or the prompt's "
        "text with its white space or colon ('query: '), put before every chunk and every query; '' for none "
        "(default: the model's default prompt, if any)",
        metavar="NAME|TEXT",
        commands=("embed", "capacity", "search"),
    ),
    Option(
        "--dim",
        int,
        "keep the first N dimensions, re-normalised (Matryoshka; default: all, or the model's truncate_dim)",
        metavar="N",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--overlap",
        int,
        f"tokens shared by neighbouring chunks (default {DEFAULT_OVERLAP})",
        DEFAULT_OVERLAP,
        metavar="N",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--chunking",
        str,
        "where chunks end: at paragraph, sentence or word boundaries near the window's end (boundaries), "
        f"or exact token windows that may end mid-word (window); default {CHUNKING_MODES[0]}",
        CHUNKING_MODES[0],
        choices=CHUNKING_MODES,
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--batch-size",
        int,
        "rows of the model's window per device per batch (default: 4 on CPU, 64 on GPU/TPU)",
        metavar="N",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--packing",
        str,
        "several sequences per row of the window (on), or one per length bucket (off); default on",
        "on",
        choices=ON_OFF,
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--mesh",
        str,
        "each encoder's device mesh; model splits heads and MLP (default: all local devices on data)",
        metavar="data=N,model=M",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--dtype",
        str,
        "encoder compute dtype (default float32); bfloat16 runs as float32 on a CPU without bfloat16 dot instructions",
        "float32",
        choices=tuple(sorted(DTYPES)),
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--attention", str, "attention implementation (default auto)", "auto", metavar="IMPL", commands=EMBED_CAPACITY
    ),
    Option(
        "--dense",
        str,
        "matmul implementation of the projections (default auto: onednn for bfloat16 on a CPU, else xla)",
        "auto",
        choices=("auto", *DENSE_IMPLS),
        commands=EMBED_CAPACITY,
    ),
    Option("--accelerator", str, "where encoders run (default auto)", "auto", choices=ACCELERATORS),
    Option("--encoders", int, "CPU encoder actors (default: one per node)", metavar="N"),
    Option(
        "--compile-cache",
        str,
        f"persistent JAX compilation cache; '' turns it off (default {DEFAULT_COMPILE_CACHE})",
        str(DEFAULT_COMPILE_CACHE),
        metavar="DIR",
        commands=("embed", "search"),
    ),
    Option("--profile", str, "write a JAX profiler trace of each encoder actor under DIR (on its node)", metavar="DIR"),
    Option(
        "--pdf-extractor",
        str,
        "PDF text extractor: auto takes the fastest installed (default auto)",
        "auto",
        choices=("auto", *PDF_EXTRACTORS),
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--extract-timeout",
        int,
        f"seconds one document's extraction may take (default {ExtractConfig.timeout_s})",
        ExtractConfig.timeout_s,
        metavar="S",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--extract-memory",
        int,
        f"MiB of memory one document's extraction may take (default {ExtractConfig.memory_mib})",
        ExtractConfig.memory_mib,
        metavar="MIB",
        commands=EMBED_CAPACITY,
    ),
    Option("--overwrite", bool, "start afresh instead of keeping or resuming the output", False),
    Option("--group-size", int, "files committed together (default 64)", 64, metavar="N"),
    Option(
        "--id-field",
        str,
        "document id field of jsonl/parquet shards (default id); '' names each row by its position, line:N "
        "or row:N, for shards without ids",
        "id",
        metavar="NAME",
        commands=EMBED_CAPACITY,
    ),
    Option(
        "--text-field",
        str,
        "text field of jsonl/parquet shards (default text)",
        "text",
        metavar="NAME",
        commands=EMBED_CAPACITY,
    ),
    Option("--quiet", bool, "print only warnings, errors and the run summary", False),
    Option("--verbose", bool, "print Ray's own progress and INFO lines as well", False),
    Option(
        "--sample-docs",
        int,
        f"documents to sample (default {CapacityConfig.sample_docs})",
        CapacityConfig.sample_docs,
        metavar="N",
        commands=("capacity",),
    ),
    Option(
        "--encoder-tokens-per-s",
        float,
        "the target chip's encoder rate per chip, instead of measuring this machine's",
        metavar="R",
        commands=("capacity",),
    ),
    Option(
        "--headroom",
        float,
        f"margin over the measured need (default {CapacityConfig.headroom})",
        CapacityConfig.headroom,
        metavar="X",
        commands=("capacity",),
    ),
)


def options_of(command: str) -> tuple[Option, ...]:
    """The options `command` takes, in the table's order (its --help's)."""
    return tuple(o for o in OPTIONS if command in o.commands)


def parse_options(
    argv: list[str] | None, command: str, *, prog: str, description: str = "", config_file: bool = False
) -> dict[str, Any]:
    """`command`'s command line (sys.argv[1:] when None), over its --config YAML file with `config_file`,
    -> a value for every option of the table, by key."""
    taken = options_of(command)
    # Defaults are applied after the YAML file, so the parser reports only what was typed.
    parser = Parser(prog=prog, description=description, argument_default=argparse.SUPPRESS)
    if config_file:
        parser.add_argument("--config", metavar="YAML", help="read options from a YAML file; flags override it")
    for o in taken:
        _add_argument(parser, o, required=o.required and not config_file)
    typed = vars(parser.parse_args(argv))
    from_file = read_config_file(typed.pop("config"), taken) if "config" in typed else {}
    overridden = {key for group in EXCLUSIVE if any(typed.get(on) for on in group) for key in group}
    from_file = {key: value for key, value in from_file.items() if key not in overridden}
    values = {o.key: o.default for o in OPTIONS} | from_file | typed
    if config_file:  # without one, the parser itself requires them
        for o in taken:
            if o.required and not values[o.key]:
                raise ConfigError(f"{o.flag} is required (on the command line or in --config)")
    return values


def _add_argument(p: argparse.ArgumentParser, o: Option, *, required: bool) -> None:
    if o.type is bool:  # --no-FLAG too: it undoes the file's `FLAG: true`
        p.add_argument(o.flag, action=argparse.BooleanOptionalAction, help=o.help)
        return
    p.add_argument(
        o.flag,
        type=o.type,
        help=o.help,
        metavar=o.metavar,
        choices=o.choices or None,
        # Repeated: `--input a --input b` and `--input a b` alike, so that a shell's glob (`--input docs/*.pdf`) works.
        action="extend" if o.repeated else "store",
        nargs="+" if o.repeated else None,
        required=required,
    )


def _check_value(o: Option, value: Any, where: str) -> Any:
    if o.choices == ON_OFF and isinstance(value, bool):  # YAML reads a bare `on`/`off` as a boolean
        value = ON_OFF[not value]
    items = value if o.repeated and isinstance(value, list) else [value]
    for item in items:
        ok = isinstance(item, o.type) and not (o.type is int and isinstance(item, bool))
        # null stands for "not given" only where the option has no default of its own (--max-tokens: the model's).
        if not ok and (item is not None or o.repeated or o.default is not None):
            raise ConfigError(
                f"{where}: {o.key} must be {'a list of ' if o.repeated else ''}{o.type.__name__}, got {item!r}"
            )
        if o.choices and item not in o.choices:
            raise ConfigError(f"{where}: {o.key} must be one of {', '.join(o.choices)}, got {item!r}")
    return items if o.repeated else value


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping, where PyYAML keeps the last silently."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        for key in {k for k in keys if isinstance(k, str) and keys.count(k) > 1}:
            raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice", node.start_mark)
        return super().construct_mapping(node, deep=deep)


def read_config_file(path: str, options: tuple[Option, ...]) -> dict[str, Any]:
    """`options` from a YAML mapping, checked key by key."""
    try:
        with open(path) as f:
            raw = yaml.load(f, Loader=_UniqueKeys) or {}
    except OSError as e:
        raise ConfigError(f"cannot read --config {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"--config {path} is not UTF-8 text: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path} is not valid YAML: {' '.join(str(e).split())}") from None  # one line
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path} must hold a mapping of option: value")
    by_key = {o.key: o for o in options}
    values, spelled = {}, {}
    for key, value in raw.items():
        option = by_key.get(str(key).replace("-", "_"))
        if option is None:
            raise ConfigError(f"--config {path}: unknown key {key!r}; known: {', '.join(sorted(by_key))}")
        if option.key in spelled:  # `max-tokens` and `max_tokens`: one would silently win
            raise ConfigError(f"--config {path}: {spelled[option.key]!r} and {key!r} are the same option")
        spelled[option.key] = key
        values[option.key] = _check_value(option, value, f"--config {path}")
    return values


def encoder_config(values: dict[str, Any]) -> EncoderConfig:
    """The encoder's options, by key, -> EncoderConfig."""
    return EncoderConfig(
        dtype=values["dtype"],
        attention=values["attention"],
        dense=values["dense"],
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


def _shared_config(values: dict[str, Any]) -> dict[str, Any]:
    """What the job and its capacity planner take alike: the inputs, the model, its window and prompt, the
    shards' fields, extraction and the encoder; JobConfig's and CapacityConfig's fields of the same names."""
    return {
        "inputs": tuple(values["input"]),
        "model": values["model"],
        "max_tokens": values["max_tokens"],
        "overlap": values["overlap"],
        "chunking": values["chunking"],
        "prompt": values["prompt"],
        "id_field": values["id_field"],
        "text_field": values["text_field"],
        "extract": extract_config(values),
        "encoder": encoder_config(values),
    }


def job_config(values: dict[str, Any]) -> JobConfig:
    """`embed`'s options, by key, -> the validated JobConfig."""
    if values["quiet"] and values["verbose"]:
        raise ConfigError("--quiet and --verbose exclude each other")
    return JobConfig(
        **_shared_config(values),
        output=values["output"],
        resources=Resources(encode_actors=values["encoders"]),
        accelerator=values["accelerator"],
        compile_cache=values["compile_cache"] or None,
        profile=values["profile"],
        overwrite=values["overwrite"],
        group_size=values["group_size"],
        verbosity="quiet" if values["quiet"] else "verbose" if values["verbose"] else "normal",
    )


def capacity_config(values: dict[str, Any]) -> CapacityConfig:
    """`capacity`'s options, by key, -> the validated CapacityConfig."""
    return CapacityConfig(
        **_shared_config(values),
        sample_docs=values["sample_docs"],
        encoder_tokens_per_s=values["encoder_tokens_per_s"],
        headroom=values["headroom"],
    )


def parse_job_args(argv: list[str] | None, description: str = "", prog: str = "jobs/embed.py") -> JobConfig:
    """`embed`'s command line (and its --config file) -> the validated JobConfig."""
    return job_config(parse_options(argv, "embed", prog=prog, description=description, config_file=True))
